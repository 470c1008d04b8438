-- The limits' shared counters (coordination.redis_limits; cronman.limits).
--
-- ARGV[1] = command, ARGV[2] = key prefix P, ARGV[3] = the epoch the caller
-- knows ("" for none). Keys, per limit name N:
--   P:limit:epoch     string      when these counters began (server ms): a Redis
--                                 that restarted empty begins a new epoch
--   P:limit:N:starts  sorted set  token -> start (server ms): the sliding log
--                                 of starts; PEXPIRE window + margin
--   P:limit:N:bucket  hash        tokens, at (server ms): the token bucket
--   P:limit:N:slots   sorted set  "{node}|{token}" -> lease end (server ms)
--   P:limit:N:waiting hash        node -> "{priority}|{until ms}": the highest
--                                 priority of the node's fires waiting on it
--
-- Every command answers the epoch first. A caller whose epoch is not the
-- current one must tell what it holds (restore) before it may take.
--
-- take: ARGV[4] node, [5] lease ms, [6] margin ms, [7] quarantine ms, [8]
--   waiting ttl ms, [9] number of limits L, then per limit: name, count,
--   window ms, burst, tokens per ms, concurrency (0: that bound off), the
--   highest priority of the caller's fires waiting on it ("-": none); then
--   per ask: token, priority, number of its limits, their 1-based indexes.
--   An ask of a lower priority than fires another node waits with on one of
--   its limits is refused (used -3): priority holds across the nodes.
--   Answers {epoch} alone (nothing taken)
--   to a caller of another epoch; else {epoch, one entry per ask}: 0
--   (granted) or {limit index, used, wait ms (-1: until a slot is released)}.
--   Once a limit refused an ask, the later asks it holds are refused too.
--   Within the quarantine of a new epoch everything is refused (used -1):
--   the nodes have that long to tell what they hold.
-- release: ARGV[4] node, then pairs (name, token).
-- renew: ARGV[4] node, [5] lease ms, then pairs (name, token): the slots held
--   (added again if Redis lost them).
-- restore: ARGV[4] node, [5] lease ms, then quadruples (kind, name, token, ms):
--   kind "s": a start made that many ms ago (kept if the log has it), "c": a
--   slot held (leased again). What a node tells of a new epoch.
-- usage: pairs (name, window ms): {in flight, starts in window} per name.

local command = ARGV[1]
local prefix = ARGV[2] .. ':limit:'
local known = ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('GET', prefix .. 'epoch')
if not epoch then
  epoch = tostring(now)
  redis.call('SET', prefix .. 'epoch', epoch)
end

if command == 'release' then
  local node = ARGV[4]
  for i = 5, #ARGV - 1, 2 do
    redis.call('ZREM', prefix .. ARGV[i] .. ':slots', node .. '|' .. ARGV[i + 1])
  end
  return epoch
end

if command == 'renew' then
  local node = ARGV[4]
  local until_ms = now + tonumber(ARGV[5])
  for i = 6, #ARGV - 1, 2 do
    local key = prefix .. ARGV[i] .. ':slots'
    redis.call('ZADD', key, until_ms, node .. '|' .. ARGV[i + 1])
    redis.call('PEXPIRE', key, tonumber(ARGV[5]) * 2)
  end
  return epoch
end

if command == 'restore' then
  local node = ARGV[4]
  local lease = tonumber(ARGV[5])
  for i = 6, #ARGV - 3, 4 do
    local base = prefix .. ARGV[i + 1]
    if ARGV[i] == 's' then
      redis.call('ZADD', base .. ':starts', 'NX', now - tonumber(ARGV[i + 3]), ARGV[i + 2])
      redis.call('PEXPIRE', base .. ':starts', 120000)
    else
      redis.call('ZADD', base .. ':slots', now + lease, node .. '|' .. ARGV[i + 2])
      redis.call('PEXPIRE', base .. ':slots', lease * 2)
    end
  end
  return epoch
end

if command == 'usage' then
  local out = {}
  for i = 4, #ARGV - 1, 2 do
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

if known ~= epoch then
  return {epoch}
end
local node = ARGV[4]
local lease = tonumber(ARGV[5])
local margin = tonumber(ARGV[6])
local quarantine = tonumber(ARGV[7]) - (now - tonumber(epoch))
local outranked_wait = 20
local wait_ttl = tonumber(ARGV[8])
local n = tonumber(ARGV[9])
local limits = {}
local i = 10
for k = 1, n do
  local lim = {name = ARGV[i], count = tonumber(ARGV[i + 1]), window = tonumber(ARGV[i + 2]),
               burst = tonumber(ARGV[i + 3]), per_ms = tonumber(ARGV[i + 4]),
               concurrency = tonumber(ARGV[i + 5])}
  local waiting = ARGV[i + 6]
  i = i + 7
  local base = prefix .. lim.name
  lim.starts_key = base .. ':starts'
  lim.bucket_key = base .. ':bucket'
  lim.slots_key = base .. ':slots'
  -- the highest priority other nodes' fires wait on it with; this node's
  local wait_key = base .. ':waiting'
  local entries = redis.call('HGETALL', wait_key)
  for j = 1, #entries, 2 do
    if entries[j] ~= node then
      local p, until_ms = string.match(entries[j + 1], '^(%-?%d+)|(%d+)$')
      if p and tonumber(until_ms) > now then
        if lim.outranks == nil or tonumber(p) > lim.outranks then
          lim.outranks = tonumber(p)
        end
      else
        redis.call('HDEL', wait_key, entries[j])
      end
    end
  end
  if waiting ~= '-' then
    redis.call('HSET', wait_key, node, waiting .. '|' .. (now + wait_ttl))
    redis.call('PEXPIRE', wait_key, wait_ttl * 4)
  elseif #entries > 0 then
    redis.call('HDEL', wait_key, node)
  end
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

local function refusal(k, lim, token, member, priority)
  if lim.closed then
    return lim.closed
  end
  if quarantine > 0 then
    return {k, -1, quarantine}
  end
  if lim.outranks ~= nil and priority < lim.outranks then
    return {k, -3, outranked_wait}
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

local out = {epoch}
while i <= #ARGV do
  local token = ARGV[i]
  local priority = tonumber(ARGV[i + 1])
  local m = tonumber(ARGV[i + 2])
  local member = node .. '|' .. token
  local mine = {}
  for j = 1, m do
    mine[j] = tonumber(ARGV[i + 2 + j])
  end
  i = i + 3 + m
  local refused = nil
  for _, k in ipairs(mine) do
    refused = refusal(k, limits[k], token, member, priority)
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
