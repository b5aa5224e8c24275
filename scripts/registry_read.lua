-- registry_read: the emulated backend's read. It first removes every entry
-- whose deadline has passed (server TIME), announcing each, then reads, so a
-- reader never sees an expired entry and the removal is atomic with the read.
--
-- KEYS[1] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[2] -> <prefix>:processes:expiry  (sorted set: process id -> deadline, ms since the epoch)
-- ARGV[1] -> a process id to read only that entry, or "" to read them all
-- ARGV[2] -> registry events channel (<prefix>:registry-events)
-- Returns: {removed, entries}: removed lists the process ids deleted now
--          because their deadline had passed (each announced with
--          {"event":"unregistered","nodeId":<id>,"reason":"expired"});
--          entries is the flat list field1, value1, field2, value2, ... of the
--          live entries read (at most one pair when ARGV[1] is not "").
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
    redis.call('PUBLISH', ARGV[2], '{"event":"unregistered","nodeId":' .. cjson.encode(id) .. ',"reason":"expired"}')
  end
end

local entries
if ARGV[1] == '' then
  entries = redis.call('HGETALL', KEYS[1])
else
  local v = redis.call('HGET', KEYS[1], ARGV[1])
  entries = {}
  if v then entries = {ARGV[1], v} end
end
return {removed, entries}
