-- The live members of the cluster, as seen by this server's clock.
--
-- KEYS[1]  {prefix}:members        sorted set: node id -> heartbeat deadline (server ms)
-- ARGV[1]  {prefix}:member:        prefix of the member hashes
--
-- Returns {now_ms, id_1, {field, value, ...}, id_2, {...}, ...} for every
-- member whose deadline lies in the future. A member whose hash is gone
-- (evicted) still counts, with an empty field list.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format('%d', now)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_s, '+inf')
local out = {now_s}
for _, id in ipairs(ids) do
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGETALL', ARGV[1] .. id)
end
return out
