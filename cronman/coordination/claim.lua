-- Take the fire locks of a batch, atomically per key.
--
-- KEYS     {prefix}:lock:{job_id}:{fire_ms}, one per fire
-- ARGV[1]  holder: "{node_id}/{instance token}"
-- ARGV[2]  lock ttl in ms
-- ARGV[3]  how far ahead of its fire time (by this server's clock) a fire may
--          be claimed, in ms; "" for no bound
--
-- A lock holds its holder while claimed and "!" .. holder once started
-- (start.lua, takeover.lua).
--
-- Returns one integer per key: 1 when the caller holds the lock (just taken,
-- or already its own, claimed or started: a retried batch keeps its locks),
-- 0 when another holder has it, 3 when the fire is further ahead than ARGV[3]
-- allows (the caller's clock runs fast: not claimed).
local started = '!' .. ARGV[1]
local ahead = tonumber(ARGV[3] or '')
local now = nil
if ahead then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local won = {}
for i, key in ipairs(KEYS) do
    if ahead and tonumber(string.match(key, ':(%d+)$')) > now + ahead then
        won[i] = 3
    elseif redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then
        won[i] = 1
    else
        local v = redis.call('GET', key)
        if v == ARGV[1] or v == started then
            won[i] = 1
        else
            won[i] = 0
        end
    end
end
return won
