-- Mark fire locks as started by the caller, right before the first attempt.
--
-- KEYS     {prefix}:lock:{job_id}:{fire_ms}, one per fire
-- ARGV[1]  holder: "{node_id}/{instance token}"
-- ARGV[2]  lock ttl in ms: a started lock lives this long from its start
-- ARGV[3]  how early (ms, by this server's clock) a fire may start; "" for no
--          check, else ARGV[4..] hold each fire's due time in Unix ms (for a
--          fire marked ahead of it, the caller's now: its clock is checked)
--
-- A lock holds its holder while claimed and "!" .. holder once started.
-- Returns one integer per key: 0 when another holder has started the fire
-- (a replica took it over: the caller must not dispatch it); -n when the
-- fire is due n ms from now, more than ARGV[3] away (the caller's clock runs
-- fast: nothing marked, ask again then); else the lock now reads
-- "!" .. ARGV[1], and the answer is 1 for the caller's own claim, 2 for a
-- lock that is gone (expired, Redis restarted) or one another holder claimed
-- but never started: the lock cannot vouch for the caller then -- a replica
-- may have taken the fire over and its started lock expired since (the
-- caller stalled past the lock's TTL) --, only the run row can.
local started = '!' .. ARGV[1]
local bound = tonumber(ARGV[3] or '')
local now = nil
if bound then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local out = {}
for i, key in ipairs(KEYS) do
    local early = bound and tonumber(ARGV[3 + i]) - now or 0
    local v = redis.call('GET', key)
    if v == started then
        out[i] = 1
    elseif v and string.sub(v, 1, 1) == '!' then
        out[i] = 0
    elseif bound and early > bound then
        out[i] = -early
    else
        -- A started lock lives the full ttl from its start (one command, not
        -- a PTTL read first: it only outlives its claim by the time between).
        redis.call('SET', key, started, 'PX', ARGV[2])
        if v == ARGV[1] then
            out[i] = 1
        else
            out[i] = 2
        end
    end
end
return out
