-- registry_probe: find out which per-entry TTL commands the server runs inside
-- scripts, by trying them on a field that no process id can name (it contains
-- a space) and deleting that field again before the script ends. Scripts run
-- atomically, so no reader ever sees the probe field.
--
-- KEYS[1] -> <prefix>:processes  (hash: process id -> ProcessInfo JSON)
-- ARGV[1] -> the probe field name
-- Returns: {native, hpexpire}, each 1 when the command worked and 0 when the
--          server refused it: native is "HSETEX key PX ms FIELDS 1 f v" (Redis
--          8, Valkey 9), hpexpire is "HPEXPIRE key ms FIELDS 1 f" (Redis 7.4+).
--          A WRONGTYPE error when KEYS[1] holds something that is not a hash.
local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then t = t.ok end
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. tostring(t) .. ', not a hash')
end

local native = 0
local r = redis.pcall('HSETEX', KEYS[1], 'PX', '60000', 'FIELDS', '1', ARGV[1], '1')
if r == 1 then native = 1 end
redis.call('HDEL', KEYS[1], ARGV[1])

local hpexpire = 0
redis.call('HSET', KEYS[1], ARGV[1], '1')
r = redis.pcall('HPEXPIRE', KEYS[1], '60000', 'FIELDS', '1', ARGV[1])
if type(r) == 'table' and r[1] == 1 then hpexpire = 1 end
redis.call('HDEL', KEYS[1], ARGV[1])

return {native, hpexpire}
