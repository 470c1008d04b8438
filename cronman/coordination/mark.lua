-- Record outcome marks, keeping the mark of the latest attempt of each run.
--
-- KEYS       {prefix}:outcome:{run_id}, one per mark
-- ARGV[1]    ttl in ms
-- ARGV[1+i]  the value for KEYS[i]: "{attempt}|{mark}"
--
-- A mark replaces the stored value unless that one is of a later attempt
-- (a stalled node's late mark never hides the outcome of the attempt that
-- replaced it). Returns the number of marks written.
local written = 0
for i, key in ipairs(KEYS) do
    local new = ARGV[i + 1]
    local old = redis.call('GET', key)
    local keep = false
    if old then
        local old_attempt = tonumber(string.match(old, '^(%d+)|'))
        local new_attempt = tonumber(string.match(new, '^(%d+)|'))
        keep = old_attempt ~= nil and new_attempt ~= nil and old_attempt > new_attempt
    end
    if not keep then
        redis.call('SET', key, new, 'PX', ARGV[1])
        written = written + 1
    end
end
return written
