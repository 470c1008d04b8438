-- Mark fire locks as started by the caller, right before the first attempt.
--
-- KEYS     {prefix}:lock:{job_id}:{fire_ms}, one per fire
-- ARGV[1]  holder: "{node_id}/{instance token}"
-- ARGV[2]  lock ttl in ms (for a lock that is gone)
--
-- A lock holds its holder while claimed and "!" .. holder once started.
-- Returns one integer per key: 0 when another holder has started the fire
-- (a replica took it over: the caller must not dispatch it), else 1 and the
-- lock now reads "!" .. ARGV[1]: the caller's own claim, a lock that is gone
-- (expired, Redis restarted: the run row made the caller the owner), or one
-- another holder claimed but never started (it lost the run row's fence).
local started = '!' .. ARGV[1]
local out = {}
for i, key in ipairs(KEYS) do
    local v = redis.call('GET', key)
    if not v then
        redis.call('SET', key, started, 'PX', ARGV[2])
        out[i] = 1
    elseif v == started then
        out[i] = 1
    elseif string.sub(v, 1, 1) == '!' then
        out[i] = 0
    else
        local ttl = redis.call('PTTL', key)
        if ttl < 1 then ttl = tonumber(ARGV[2]) end
        redis.call('SET', key, started, 'PX', ttl)
        out[i] = 1
    end
end
return out
