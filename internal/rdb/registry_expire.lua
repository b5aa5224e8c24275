-- registry_expire: the emulated backend's expiry. It removes every entry
-- whose deadline has passed (server TIME) and announces each. Readers run it
-- in one MULTI with their HGETALL or HMGET (RegistryRead), so a reader never
-- sees an expired entry and the removal is atomic with the read, while the
-- entries themselves travel as a plain reply instead of through Lua tables.
-- Each removal is a registry write: it mints a version as registry_put.lua
-- does (max(KEYS[3] + 1, server TIME in microseconds)), sent in its notice.
--
-- KEYS[1] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[2] -> <prefix>:processes:expiry  (sorted set: process id -> deadline, ms since the epoch)
-- KEYS[3] -> <prefix>:processes:version (string: the last minted registry version)
-- ARGV[1] -> registry events channel (<prefix>:registry-events)
-- Returns: the process ids deleted now because their deadline had passed,
--          each announced with
--          {"event":"unregistered","nodeId":<id>,"version":<version>,"reason":"expired"}.
--
-- The notice is JSON built in a fixed member order: strings that come from
-- the caller or from Redis through cjson.encode, numbers as decimal text
-- (string.format('%d')). cjson.encode writes numbers above 10^14 in exponent
-- form with 14 digits (1.7726007670001e+15) and orders a table's members
-- differently on each server, so it never encodes a number or a whole notice.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now))
if #expired == 0 then return {} end
local version = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = redis.pcall('GET', KEYS[3])
-- A counter that is not a decimal below 2^53 - 1 - #expired (the largest
-- integer a Lua number holds exactly, less the versions this call mints) is
-- garbage and counts as none: every version minted is then exact.
if type(last) == 'string' and string.match(last, '^%d+$') and tonumber(last) < 9007199254740991 - #expired and tonumber(last) >= version then
  version = tonumber(last) + 1
end
-- Every write checked against the user's ACL before the first one (writes.lua).
local denied = refused('registry expire', {{'ZREM', KEYS[2], 'f'}, {'HDEL', KEYS[1], 'f'}, {'SET', KEYS[3], 'x'}, {'PUBLISH', ARGV[1], 'x'}})
if denied then
  return denied
end
local removed = {}
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  if redis.call('HDEL', KEYS[1], id) == 1 then
    removed[#removed + 1] = id
    local v = string.format('%d', version)
    version = version + 1
    redis.call('SET', KEYS[3], v)
    redis.call('PUBLISH', ARGV[1], '{"event":"unregistered","nodeId":' .. cjson.encode(id) ..
      ',"version":' .. v .. ',"reason":"expired"}')
  end
end
return removed
