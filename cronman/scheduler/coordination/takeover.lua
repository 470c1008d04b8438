-- Take over fires whose holder claimed them but never started them (it died
-- or stalled between its claim and the due time).
--
-- KEYS     {prefix}:lock:{job_id}:{fire_ms}, one per fire
-- ARGV[1]  taker: "{node_id}/{instance token}"
--
-- Returns one integer per key: 1 when taken (the lock now reads
-- "!" .. ARGV[1], started by the taker, its expiry kept), 0 when the fire was
-- started (by anyone), is the taker's own claim, or has no lock (nothing
-- says it was not started: never taken).
local out = {}
for i, key in ipairs(KEYS) do
    local v = redis.call('GET', key)
    if v and string.sub(v, 1, 1) ~= '!' and v ~= ARGV[1] then
        local ttl = redis.call('PTTL', key)
        if ttl > 0 then
            redis.call('SET', key, '!' .. ARGV[1], 'PX', ttl)
            out[i] = 1
        else
            out[i] = 0
        end
    else
        out[i] = 0
    end
end
return out
