-- A node leaves the membership at once (clean shutdown). Idempotent.
--
-- KEYS[1]  {prefix}:members        sorted set: node id -> heartbeat deadline (server ms)
-- KEYS[2]  {prefix}:member:{id}    hash of the node's info
-- KEYS[3]  {prefix}:membership     stream: the membership changes
-- ARGV[1]  node id
-- ARGV[2]  the most entries the membership stream keeps (approximately)
--
-- Logs the node as left when it was a member. Returns 1 then, else 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = redis.call('HMGET', KEYS[2], 'started_at', 'address')
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
if removed == 1 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*', 'kind', 'left',
               'node', ARGV[1], 'at', string.format('%d', now),
               'started_at', info[1] or '', 'address', info[2] or '')
end
return removed
