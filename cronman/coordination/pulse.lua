-- Write this node's pulse and read its peers', with the server's time.
--
-- KEYS[1]     {prefix}:pulse:{node_id}, this node's
-- KEYS[2..n]  {prefix}:pulse:{peer_id}, the peers'
-- ARGV[1]     payload (the scheduler's progress, opaque here)
-- ARGV[2]     ttl in ms: a node that stops pulsing is gone from here after it
--
-- A pulse reads "{server Unix ms}|{payload}". Returns the server's time in
-- Unix ms, then each peer's pulse (false where there is none).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], now .. '|' .. ARGV[1], 'PX', ARGV[2])
local out = {now}
for i = 2, #KEYS do
    out[i] = redis.call('GET', KEYS[i])
end
return out
