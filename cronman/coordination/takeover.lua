-- Take over fires whose holder claimed them but never started them, unless
-- the holder is alive (it is only late: it starts them itself).
--
-- KEYS     {prefix}:lock:{job_id}:{fire_ms}, one per fire
-- ARGV[1]  taker: "{node_id}/{instance token}"
-- ARGV[2]  lock ttl in ms: a lock taken over lives this long from then
-- ARGV[3]  "1": tell a fire whose lock is absent (the taker watched it as
--          its second owner; the run row decides whether anybody claimed
--          it); "0": leave it (nothing says it was not started)
-- ARGV[4..] node ids of holders known alive (pulsing, dispatch progressing)
--
-- A lock holds its holder while claimed and "!" .. holder once started.
-- Returns one integer per key: 1 when taken from a holder (the lock now reads
-- "!" .. ARGV[1]), 4 when there is no lock (ARGV[3] "1"; nothing is written),
-- 2 when claimed by an alive holder and not started yet (watch it again
-- later), 0 otherwise: started (by anyone), the taker's own claim, or absent
-- when ARGV[3] is "0".
local alive = {}
for i = 4, #ARGV do
    alive[ARGV[i]] = true
end
local started = '!' .. ARGV[1]
local out = {}
for i, key in ipairs(KEYS) do
    local v = redis.call('GET', key)
    if not v then
        if ARGV[3] == '1' then
            out[i] = 4
        else
            out[i] = 0
        end
    elseif string.sub(v, 1, 1) == '!' or v == ARGV[1] then
        out[i] = 0
    elseif alive[string.match(v, '^(.*)/')] then
        out[i] = 2
    else
        redis.call('SET', key, started, 'PX', ARGV[2])
        out[i] = 1
    end
end
return out
