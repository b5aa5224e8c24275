-- registry_expire: the emulated backend's expiry. It removes every entry
-- whose deadline has passed (server TIME) and announces each. Readers run it
-- in one MULTI with their HGETALL or HGET (RegistryRead), so a reader never
-- sees an expired entry and the removal is atomic with the read, while the
-- entries themselves travel as a plain reply instead of through Lua tables.
--
-- KEYS[1] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[2] -> <prefix>:processes:expiry  (sorted set: process id -> deadline, ms since the epoch)
-- ARGV[1] -> registry events channel (<prefix>:registry-events)
-- Returns: the process ids deleted now because their deadline had passed,
--          each announced with {"event":"unregistered","nodeId":<id>,"reason":"expired"}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now))
local removed = {}
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  if redis.call('HDEL', KEYS[1], id) == 1 then
    removed[#removed + 1] = id
    -- ids in the sorted set come from registry_put, but encode them anyway:
    -- anything may have written there.
    redis.call('PUBLISH', ARGV[1], '{"event":"unregistered","nodeId":' .. cjson.encode(id) .. ',"reason":"expired"}')
  end
end
return removed
