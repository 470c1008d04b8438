-- The membership changes kept in the stream, newest first, after logging the
-- members whose deadline has passed as expired (as a heartbeat would: so a
-- cluster whose last node died still shows it).
--
-- KEYS[1]  {prefix}:members        sorted set: node id -> heartbeat deadline (server ms)
-- KEYS[2]  {prefix}:membership     stream of changes: kind (joined, left, expired),
--                                  node, at (server ms; an expiry is dated by the
--                                  member's deadline), started_at, address
-- ARGV[1]  the most entries the stream keeps (approximately), and the most returned
--
-- Returns {now_ms, {entry id, {field, value, ...}}, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format('%d', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_s, 'WITHSCORES')
for i = 1, #gone, 2 do
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', 'kind', 'expired',
               'node', gone[i], 'at', gone[i + 1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_s)
return {now_s, redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[1])}
