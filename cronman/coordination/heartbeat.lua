-- Heartbeat of one node, stamped with the Redis server's clock (never the
-- node's, so clock skew between nodes cannot make a member look fresh or stale).
--
-- KEYS[1]  {prefix}:members        sorted set: node id -> heartbeat deadline (server ms)
-- KEYS[2]  {prefix}:member:{id}    hash of the node's info, expiring with the deadline
-- KEYS[3]  {prefix}:membership     stream: the membership changes (see expire.lua)
-- ARGV[1]  node id
-- ARGV[2]  ttl in ms
-- ARGV[3]  address
-- ARGV[4]  started_at in Unix ms, or ""
-- ARGV[5]  stats as JSON
-- ARGV[6]  the most entries the membership stream keeps (approximately)
--
-- Drops members whose deadline has passed (logging each as expired), then
-- (re)writes this one (logging it as joined when it was not a member).
-- Returns the server time (ms) recorded as its last heartbeat.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local now_s = string.format('%d', now)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_s, 'WITHSCORES')
for i = 1, #gone, 2 do
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'kind', 'expired',
               'node', gone[i], 'at', gone[i + 1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_s)
local added = redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
if added == 1 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'kind', 'joined',
               'node', ARGV[1], 'at', now_s, 'started_at', ARGV[4], 'address', ARGV[3])
end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'address', ARGV[3], 'started_at', ARGV[4],
           'last_heartbeat', now_s, 'ttl_ms', ARGV[2], 'stats', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ttl)
return now
