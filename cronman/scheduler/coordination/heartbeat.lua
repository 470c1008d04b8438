-- Heartbeat of one node, stamped with the Redis server's clock (never the
-- node's, so clock skew between nodes cannot make a member look fresh or stale).
--
-- KEYS[1]  {prefix}:members        sorted set: node id -> heartbeat deadline (server ms)
-- KEYS[2]  {prefix}:member:{id}    hash of the node's info, expiring with the deadline
-- ARGV[1]  node id
-- ARGV[2]  ttl in ms
-- ARGV[3]  address
-- ARGV[4]  started_at in Unix ms, or ""
-- ARGV[5]  stats as JSON
--
-- Drops members whose deadline has passed, then (re)writes this one.
-- Returns the server time (ms) recorded as its last heartbeat.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local now_s = string.format('%d', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_s)
redis.call('ZADD', KEYS[1], string.format('%d', now + ttl), ARGV[1])
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'address', ARGV[3], 'started_at', ARGV[4],
           'last_heartbeat', now_s, 'ttl_ms', ARGV[2], 'stats', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ttl)
return now
