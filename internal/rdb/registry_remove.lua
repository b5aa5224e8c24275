-- registry_remove: delete one process's entry and announce it. With a guard
-- value it deletes only an entry that still holds that value, so the master's
-- cleanup of a stale slave never deletes a heartbeat written after it looked.
-- A deletion is a registry write: it mints a version as registry_put.lua does
-- (max(KEYS[3] + 1, server TIME in microseconds)), sent in the notice.
--
-- KEYS[1] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[2] -> <prefix>:processes:expiry  (sorted set: process id -> deadline ms;
--                                        empty unless the backend is emulated)
-- KEYS[3] -> <prefix>:processes:version (string: the last minted registry version)
-- ARGV[1] -> process id (the hash field)
-- ARGV[2] -> "1" to delete only when the entry holds exactly ARGV[3];
--            "i" to delete it unless its "incarnation" member is another
--            non-empty one than ARGV[3] (a process leaving never deletes
--            the entry of a later process under its id);
--            "" to delete whatever it holds
-- ARGV[3] -> the guard value or incarnation (ignored when ARGV[2] is "")
-- ARGV[4] -> reason put into the notice ("stale"), or "" when the process
--            unregisters itself
-- ARGV[5] -> registry events channel (<prefix>:registry-events)
-- Returns: the version minted when a live entry was deleted and announced with
--          {"event":"unregistered","nodeId":<id>,"version":<version>[,"reason":<reason>]};
--          0 when there was no live entry or it did not hold the guard value.
--
-- The notice is JSON built in a fixed member order: strings that come from
-- the caller or from Redis through cjson.encode, numbers as decimal text
-- (string.format('%d')). cjson.encode writes numbers above 10^14 in exponent
-- form with 14 digits (1.7726007670001e+15) and orders a table's members
-- differently on each server, so it never encodes a number or a whole notice.
local id = ARGV[1]
local value = redis.call('HGET', KEYS[1], id)
local deadline = tonumber(redis.call('ZSCORE', KEYS[2], id))
local t = redis.call('TIME')
local live = value ~= false
if live and deadline then
  live = deadline > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if live and ARGV[2] == '1' and value ~= ARGV[3] then return 0 end
if live and ARGV[2] == 'i' then
  local ok, entry = pcall(cjson.decode, value)
  if ok and type(entry) == 'table' and type(entry.incarnation) == 'string' and entry.incarnation ~= '' and
      entry.incarnation ~= ARGV[3] then
    return 0
  end
end
local last = redis.pcall('GET', KEYS[3])
-- Every write checked against the user's ACL before the first one (writes.lua).
local denied = refused('registry remove', {{'HDEL', KEYS[1], 'f'}, {'ZREM', KEYS[2], 'f'}, {'SET', KEYS[3], 'x'}, {'PUBLISH', ARGV[5], 'x'}})
if denied then
  return denied
end

redis.call('HDEL', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
if not live then return 0 end

local version = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- A counter that is not a decimal below 2^53 - 1 (the largest integer a Lua
-- number holds exactly) is garbage and counts as none: the minted version is
-- then exact, and so is every one after it.
if type(last) == 'string' and string.match(last, '^%d+$') and tonumber(last) < 9007199254740991 and tonumber(last) >= version then
  version = tonumber(last) + 1
end
version = string.format('%d', version)
redis.call('SET', KEYS[3], version)

local notice = '{"event":"unregistered","nodeId":' .. cjson.encode(id) .. ',"version":' .. version
if ARGV[4] ~= '' then notice = notice .. ',"reason":' .. cjson.encode(ARGV[4]) end
redis.call('PUBLISH', ARGV[5], notice .. '}')
return tonumber(version)
