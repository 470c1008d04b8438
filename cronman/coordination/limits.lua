-- The limits' shared counters (coordination.redis_limits; cronman.limits).
--
-- ARGV[1] = command, ARGV[2] = key prefix P. Keys, per limit name N:
--   P:limit:N:starts  sorted set  token -> start (server ms): the sliding log
--                                 of starts; PEXPIRE window + margin
--   P:limit:N:bucket  hash        tokens, at (server ms): the token bucket
--   P:limit:N:slots   sorted set  "{node}|{token}" -> lease end (server ms)
--
-- take: ARGV[3] node, [4] lease ms, [5] margin ms, [6] number of limits L,
--   then per limit: name, count, window ms, burst, tokens per ms, concurrency
--   (0: that bound off); then per ask: token, number of its limits, their
--   1-based indexes. Answers one entry per ask: 0 (granted) or
--   {limit index, used, wait ms (-1: until a slot is released)}. Once a
--   limit refused an ask, the later asks it holds are refused too.
-- release: ARGV[3] node, then pairs (name, token).
-- renew: ARGV[3] node, [4] lease ms, then pairs (name, token): only slots still held.
-- usage: pairs (name, window ms): {in flight, starts in window} per name.

local command = ARGV[1]
local prefix = ARGV[2] .. ':limit:'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if command == 'release' then
  local node = ARGV[3]
  for i = 4, #ARGV - 1, 2 do
    redis.call('ZREM', prefix .. ARGV[i] .. ':slots', node .. '|' .. ARGV[i + 1])
  end
  return 1
end

if command == 'renew' then
  local node = ARGV[3]
  local until_ms = now + tonumber(ARGV[4])
  for i = 5, #ARGV - 1, 2 do
    local key = prefix .. ARGV[i] .. ':slots'
    redis.call('ZADD', key, 'XX', until_ms, node .. '|' .. ARGV[i + 1])
    redis.call('PEXPIRE', key, tonumber(ARGV[4]) * 2)
  end
  return 1
end

if command == 'usage' then
  local out = {}
  for i = 3, #ARGV - 1, 2 do
    local base = prefix .. ARGV[i]
    local window = tonumber(ARGV[i + 1])
    out[#out + 1] = redis.call('ZCOUNT', base .. ':slots', '(' .. now, '+inf')
    out[#out + 1] = redis.call('ZCOUNT', base .. ':starts', '(' .. (now - window), '+inf')
  end
  return out
end

if command ~= 'take' then
  return redis.error_reply('unknown command ' .. tostring(command))
end

local node = ARGV[3]
local lease = tonumber(ARGV[4])
local margin = tonumber(ARGV[5])
local n = tonumber(ARGV[6])
local limits = {}
local i = 7
for k = 1, n do
  local lim = {name = ARGV[i], count = tonumber(ARGV[i + 1]), window = tonumber(ARGV[i + 2]),
               burst = tonumber(ARGV[i + 3]), per_ms = tonumber(ARGV[i + 4]),
               concurrency = tonumber(ARGV[i + 5])}
  i = i + 6
  local base = prefix .. lim.name
  lim.starts_key = base .. ':starts'
  lim.bucket_key = base .. ':bucket'
  lim.slots_key = base .. ':slots'
  if lim.count > 0 then
    redis.call('ZREMRANGEBYSCORE', lim.starts_key, '-inf', now - lim.window - margin)
    lim.started = redis.call('ZCARD', lim.starts_key)
  end
  if lim.burst > 0 then
    local state = redis.call('HMGET', lim.bucket_key, 'tokens', 'at')
    local tokens = tonumber(state[1])
    local at = tonumber(state[2])
    if tokens == nil or at == nil then
      tokens = lim.burst
    else
      tokens = math.min(lim.burst, tokens + math.max(0, now - at) * lim.per_ms)
    end
    lim.tokens = tokens
  end
  if lim.concurrency > 0 then
    redis.call('ZREMRANGEBYSCORE', lim.slots_key, '-inf', now)
    lim.in_flight = redis.call('ZCARD', lim.slots_key)
  end
  limits[k] = lim
end

local function refusal(k, lim, token, member)
  if lim.closed then
    return lim.closed
  end
  if lim.count > 0 and lim.started >= lim.count then
    -- the start that has to leave the window before another may come
    local nth = redis.call('ZRANGE', lim.starts_key, -lim.count, -lim.count, 'WITHSCORES')
    local wait = 1
    if nth[2] ~= nil then
      wait = math.max(1, tonumber(nth[2]) + lim.window + margin - now + 1)
    end
    return {k, lim.started, wait}
  end
  if lim.burst > 0 and lim.tokens < 1 then
    return {k, lim.burst, math.max(1, math.ceil((1 - lim.tokens) / math.max(lim.per_ms, 1e-9)))}
  end
  if lim.concurrency > 0 and lim.in_flight >= lim.concurrency
      and not redis.call('ZSCORE', lim.slots_key, member) then
    return {k, lim.in_flight, -1}
  end
  return nil
end

local out = {}
while i <= #ARGV do
  local token = ARGV[i]
  local m = tonumber(ARGV[i + 1])
  local member = node .. '|' .. token
  local mine = {}
  for j = 1, m do
    mine[j] = tonumber(ARGV[i + 1 + j])
  end
  i = i + 2 + m
  local refused = nil
  for _, k in ipairs(mine) do
    refused = refusal(k, limits[k], token, member)
    if refused then
      limits[k].closed = refused
      break
    end
  end
  if refused then
    out[#out + 1] = refused
  else
    for _, k in ipairs(mine) do
      local lim = limits[k]
      if lim.count > 0 then
        if redis.call('ZADD', lim.starts_key, now, token) == 1 then
          lim.started = lim.started + 1
        end
      end
      if lim.burst > 0 then
        lim.tokens = lim.tokens - 1
      end
      if lim.concurrency > 0 then
        if redis.call('ZADD', lim.slots_key, now + lease, member) == 1 then
          lim.in_flight = lim.in_flight + 1
        end
      end
    end
    out[#out + 1] = 0
  end
end

for _, lim in ipairs(limits) do
  if lim.count > 0 then
    redis.call('PEXPIRE', lim.starts_key, lim.window + margin + 1000)
  end
  if lim.burst > 0 then
    redis.call('HSET', lim.bucket_key, 'tokens', tostring(lim.tokens), 'at', now)
    redis.call('PEXPIRE', lim.bucket_key,
               math.ceil(lim.burst / math.max(lim.per_ms, 1e-9)) + 60000)
  end
  if lim.concurrency > 0 then
    redis.call('PEXPIRE', lim.slots_key, lease * 2)
  end
end
return out
