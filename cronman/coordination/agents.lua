-- The agent hand-over (coordination/agents.py), one command per call:
--   EVALSHA sha 0 <command> <prefix> args...
-- Key layout (P = prefix):
--   P:agents                zset   agent id -> heartbeat deadline (server Unix ms)
--   P:agent:{id}            hash   info (JSON), beat (server ms), cpu, mem, slots; PEXPIRE ttl
--   P:agent-runs:{id}       hash   run id -> "cpu|memory_mb|attempt": what is reserved on
--                                  the agent (placed and not yet finished)
--   P:inbox:{id}            list   JSON messages for the agent ("start", "stop")
--   P:placement:{run_id}    hash   attempt, agent, state, deadline (server ms: the offer's
--                                  or the lease's), cpu, mem, outcome (JSON, once done);
--                                  PEXPIRE keep (an hour or so)
-- Every deadline is the Redis server's TIME, read here.
local cmd, P = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local AGENTS = P .. ':agents'
local function agent_key(id) return P .. ':agent:' .. id end
local function runs_key(id) return P .. ':agent-runs:' .. id end
local function inbox_key(id) return P .. ':inbox:' .. id end
local function placement_key(run) return P .. ':placement:' .. run end
local LIVE = {offered = true, running = true, stopping = true}
local RESERVATIONS_TTL = 86400000

local function unreserve(agent, run, attempt)
  if not agent then return end
  local held = redis.call('HGET', runs_key(agent), run)
  if held and (attempt == nil or string.match(held, '[^|]*|[^|]*|(.*)') == tostring(attempt)) then
    redis.call('HDEL', runs_key(agent), run)
  end
end

local function used(agent)
  local cpu, mem, slots = 0, 0, 0
  for _, v in ipairs(redis.call('HVALS', runs_key(agent))) do
    local c, m = string.match(v, '([^|]*)|([^|]*)|')
    cpu = cpu + (tonumber(c) or 0)
    mem = mem + (tonumber(m) or 0)
    slots = slots + 1
  end
  return cpu, mem, slots
end

local function placement(run)
  local p = redis.call('HMGET', placement_key(run), 'attempt', 'agent', 'state', 'deadline')
  if not p[1] then return nil end
  return {attempt = tonumber(p[1]), agent = p[2], state = p[3], deadline = tonumber(p[4])}
end

if cmd == 'heartbeat' then
  -- id, ttl_ms, info, cpu, mem, slots
  local id, ttl = ARGV[3], tonumber(ARGV[4])
  redis.call('HSET', agent_key(id), 'info', ARGV[5], 'beat', now, 'cpu', ARGV[6],
             'mem', ARGV[7], 'slots', ARGV[8])
  redis.call('PEXPIRE', agent_key(id), ttl)
  redis.call('ZADD', AGENTS, now + ttl, id)
  redis.call('ZREMRANGEBYSCORE', AGENTS, '-inf', now)
  redis.call('PEXPIRE', runs_key(id), RESERVATIONS_TTL)
  redis.call('PEXPIRE', inbox_key(id), RESERVATIONS_TTL)
  return now

elseif cmd == 'leave' then
  redis.call('ZREM', AGENTS, ARGV[3])
  redis.call('DEL', agent_key(ARGV[3]))
  return 1

elseif cmd == 'agents' then
  redis.call('ZREMRANGEBYSCORE', AGENTS, '-inf', now)
  local out = {tostring(now)}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', AGENTS, '(' .. now, '+inf')) do
    local a = redis.call('HMGET', agent_key(id), 'info', 'beat')
    if a[1] then
      local cpu, mem, slots = used(id)
      for _, v in ipairs({id, a[1], a[2], tostring(cpu), tostring(mem), tostring(slots)}) do
        table.insert(out, v)
      end
    end
  end
  return out

elseif cmd == 'place' then
  -- run, attempt, agent, cpu, mem, offer_ms, keep_ms, message
  local run, attempt, agent = ARGV[3], tonumber(ARGV[4]), ARGV[5]
  local cpu, mem = tonumber(ARGV[6]), tonumber(ARGV[7])
  local score = redis.call('ZSCORE', AGENTS, agent)
  local cap = redis.call('HMGET', agent_key(agent), 'cpu', 'mem', 'slots')
  if not score or tonumber(score) <= now or not cap[1] then return 'gone' end
  local p = placement(run)
  if p then
    if p.attempt > attempt then return 'fenced' end
    if LIVE[p.state] and p.deadline > now then return 'live' end
    unreserve(p.agent, run, p.attempt)
  end
  local ucpu, umem, uslots = used(agent)
  if tonumber(cap[3]) - uslots < 1 or tonumber(cap[1]) - ucpu + 1e-6 < cpu
     or tonumber(cap[2]) - umem < mem then
    return 'full'
  end
  redis.call('HSET', runs_key(agent), run, ARGV[6] .. '|' .. ARGV[7] .. '|' .. attempt)
  redis.call('PEXPIRE', runs_key(agent), RESERVATIONS_TTL)
  local pk = placement_key(run)
  redis.call('DEL', pk)
  redis.call('HSET', pk, 'attempt', attempt, 'agent', agent, 'state', 'offered',
             'deadline', now + tonumber(ARGV[8]), 'cpu', ARGV[6], 'mem', ARGV[7])
  redis.call('PEXPIRE', pk, tonumber(ARGV[9]))
  redis.call('RPUSH', inbox_key(agent), ARGV[10])
  redis.call('PEXPIRE', inbox_key(agent), RESERVATIONS_TTL)
  return 'placed'

elseif cmd == 'ack' then
  -- agent, run, attempt, lease_ms
  local agent, run, attempt = ARGV[3], ARGV[4], tonumber(ARGV[5])
  local p = placement(run)
  if p and p.agent == agent and p.attempt == attempt and p.state == 'offered'
     and p.deadline > now then
    redis.call('HSET', placement_key(run), 'state', 'running', 'deadline', now + tonumber(ARGV[6]))
    return 1
  end
  unreserve(agent, run, attempt)
  return 0

elseif cmd == 'renew' then
  -- agent, lease_ms, run1, attempt1, ...
  local agent, lease = ARGV[3], tonumber(ARGV[4])
  local out = {}
  for i = 5, #ARGV, 2 do
    local run, attempt = ARGV[i], tonumber(ARGV[i + 1])
    local p = placement(run)
    if not p or p.agent ~= agent or p.attempt ~= attempt or not LIVE[p.state] then
      table.insert(out, 'fenced')
    else
      if p.state ~= 'offered' then
        redis.call('HSET', placement_key(run), 'deadline', now + lease)
      end
      table.insert(out, p.state == 'stopping' and 'stop' or 'ok')
    end
  end
  return out

elseif cmd == 'finish' then
  -- agent, run, attempt, outcome, keep_ms
  local agent, run, attempt = ARGV[3], ARGV[4], tonumber(ARGV[5])
  unreserve(agent, run, attempt)
  local p = placement(run)
  if p and p.agent == agent and p.attempt == attempt
     and (p.state == 'running' or p.state == 'stopping') then
    redis.call('HSET', placement_key(run), 'state', 'done', 'outcome', ARGV[6])
    redis.call('PEXPIRE', placement_key(run), tonumber(ARGV[7]))
    return 1
  end
  return 0

elseif cmd == 'release' then
  unreserve(ARGV[3], ARGV[4], tonumber(ARGV[5]))
  return 1

elseif cmd == 'placements' then
  local out = {}
  for i = 3, #ARGV do
    local p = placement(ARGV[i])
    if p then
      local has = redis.call('HEXISTS', placement_key(ARGV[i]), 'outcome')
      for _, v in ipairs({tostring(p.attempt), p.agent, p.state, tostring(p.deadline - now),
                          tostring(has)}) do
        table.insert(out, v)
      end
    else
      for _ = 1, 5 do table.insert(out, '') end
    end
  end
  return out

elseif cmd == 'take' then
  local p = placement(ARGV[3])
  if p and p.state == 'done' then
    redis.call('HSET', placement_key(ARGV[3]), 'state', 'taken')
    return redis.call('HGET', placement_key(ARGV[3]), 'outcome')
  end
  return false

elseif cmd == 'lost' then
  -- run, attempt
  local run, attempt = ARGV[3], tonumber(ARGV[4])
  local p = placement(run)
  if p and p.attempt == attempt and LIVE[p.state] and p.deadline <= now then
    redis.call('HSET', placement_key(run), 'state', 'lost')
    unreserve(p.agent, run, attempt)
    return p.state
  end
  return ''

elseif cmd == 'stop' then
  -- run, attempt
  local run, attempt = ARGV[3], tonumber(ARGV[4])
  local p = placement(run)
  if not p or p.attempt ~= attempt then return '' end
  if p.state == 'offered' then
    redis.call('HSET', placement_key(run), 'state', 'cancelled')
    unreserve(p.agent, run, attempt)
    return 'cancelled'
  elseif p.state == 'running' then
    redis.call('HSET', placement_key(run), 'state', 'stopping')
    redis.call('RPUSH', inbox_key(p.agent),
               cjson.encode({kind = 'stop', run_id = run, attempt = attempt}))
    return 'stopping'
  elseif p.state == 'stopping' then
    return 'stopping'
  end
  return ''
end
return redis.error_reply('unknown command ' .. tostring(cmd))
