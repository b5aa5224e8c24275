-- registry_put: write one process's entry with its TTL and, when the entry is
-- new or the write is a registration, announce it, all in one round trip.
-- Register and Heartbeat both use it: a heartbeat rewrites the entry from the
-- process's last known info, so an entry lost with the data (or removed by the
-- master) comes back on the next heartbeat.
--
-- KEYS[1] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[2] -> <prefix>:processes:expiry  (sorted set: process id scored by its
--                                        deadline, ms since the epoch; emulated only)
-- ARGV[1] -> backend: "native" (HSETEX PX), "hpexpire" (HSET + HPEXPIRE) or
--            "emulated" (HSET + ZADD deadline, deadline = server TIME + TTL)
-- ARGV[2] -> process id (the hash field)
-- ARGV[3] -> ProcessInfo JSON object
-- ARGV[4] -> TTL (milliseconds)
-- ARGV[5] -> "register" (always announce) or "heartbeat" (announce only
--            when the entry was absent, that is when this re-registers it)
-- ARGV[6] -> role ("master" or "slave"), copied into the notice
-- ARGV[7] -> registry events channel (<prefix>:registry-events)
-- Returns: 1 when the entry was absent (or expired) before, 0 when it replaced
--          a live entry.
--
-- The notice is {"event":"registered","nodeId":<id>,"role":<role>,"process":<ARGV[3]>};
-- the caller guarantees that id and role need no JSON escaping.
local mode, id = ARGV[1], ARGV[2]
local existed = redis.call('HEXISTS', KEYS[1], id) == 1

if mode == 'native' then
  redis.call('HSETEX', KEYS[1], 'PX', ARGV[4], 'FIELDS', '1', id, ARGV[3])
elseif mode == 'hpexpire' then
  redis.call('HSET', KEYS[1], id, ARGV[3])
  redis.call('HPEXPIRE', KEYS[1], ARGV[4], 'FIELDS', '1', id)
elseif mode == 'emulated' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local deadline = tonumber(redis.call('ZSCORE', KEYS[2], id))
  if existed and deadline and deadline <= now then existed = false end
  redis.call('HSET', KEYS[1], id, ARGV[3])
  redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[4])), id)
else
  return redis.error_reply('ERR registry_put: unknown backend ' .. tostring(mode))
end

if ARGV[5] == 'register' or not existed then
  redis.call('PUBLISH', ARGV[7], '{"event":"registered","nodeId":"' .. id ..
    '","role":"' .. ARGV[6] .. '","process":' .. ARGV[3] .. '}')
end
if existed then return 0 end
return 1
