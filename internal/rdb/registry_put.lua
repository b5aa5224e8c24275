-- registry_put: write one process's entry with its TTL and, when the entry is
-- new or the write is a registration, announce it, all in one round trip.
-- Register and Heartbeat both use it: a heartbeat rewrites the entry from the
-- process's last known info, so an entry lost with the data (or removed by the
-- master) comes back on the next heartbeat.
--
-- Every write mints a version, stored in the entry as its "version" member and
-- sent in the notice: max(the registry's version counter + 1, server TIME in
-- microseconds), kept in KEYS[5], which has no TTL. It is larger than every
-- version minted before on this lock name: by the counter while the key lives
-- (also between writes of one microsecond, and after the entry was deleted),
-- by the server's clock after Redis lost the key with its data.
--
-- A write with role master is fenced like the lock: it is stored as given only
-- while KEYS[3] holds the writer's node id and KEYS[4] the term it writes.
-- Otherwise the process is not master (its lock expired or was taken while it
-- was paused, say) and the fallback value, the same entry with role slave, is
-- written and announced instead.
--
-- KEYS[1] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[2] -> <prefix>:processes:expiry  (sorted set: process id scored by its
--                                        deadline, ms since the epoch; emulated only)
-- KEYS[3] -> <prefix>:master            (string: node id of the lock's holder)
-- KEYS[4] -> <prefix>:term              (string: the last minted term)
-- KEYS[5] -> <prefix>:processes:version (string: the last minted registry version)
-- ARGV[1] -> backend: "native" (HSETEX PX), "hpexpire" (HSET + HPEXPIRE) or
--            "emulated" (HSET + ZADD deadline, deadline = server TIME + TTL)
-- ARGV[2] -> process id (the hash field)
-- ARGV[3] -> ProcessInfo JSON object with at least one member and no
--            "version" member (the script appends it)
-- ARGV[4] -> TTL (milliseconds)
-- ARGV[5] -> "register" (always announce) or "heartbeat" (announce only
--            when the entry was absent, that is when this re-registers it)
-- ARGV[6] -> role ("master" or "slave"), copied into the notice
-- ARGV[7] -> registry events channel (<prefix>:registry-events)
-- ARGV[8] -> node id the lock must hold for a master write (ignored for a slave)
-- ARGV[9] -> term the lock must be held under for a master write, decimal;
--            "" never matches (ignored for a slave)
-- ARGV[10] -> the entry to write instead when a master write is refused: a
--             ProcessInfo JSON object with role slave, of the same form as
--             ARGV[3] (ignored for a slave)
-- ARGV[11] -> the writer's incarnation ("" for none), also in ARGV[3]
-- ARGV[12] -> quiet: ms; a live entry whose "incarnation" member is another
--             non-empty one and whose last write (its "version", the
--             server's TIME in microseconds at the write) is younger than
--             this is another process's under the same id: nothing is
--             written and the reply is {"in use", its incarnation, its age
--             in ms, its "identifier"}. 0 never refuses.
-- ARGV[13] -> the version of the writer's last write of this entry, decimal
--             ("" for none): a live entry that still ends with it, as every
--             entry ends with the version its write minted, is that write,
--             the writer's own, and its incarnation is not decoded.
-- Returns: {created, version, fenced, holder, term} (or the "in use" reply
--          of ARGV[12]): created is 1 when the
--          entry was absent (or expired) before the write, 0 when it replaced
--          a live entry; version is the version minted; fenced is 1 when a
--          master write was refused and ARGV[10] written with role slave, 0
--          otherwise; holder and term are then the contents of KEYS[3] and
--          KEYS[4] ("" when missing or not a string).
--
-- The notice is {"event":"registered","nodeId":<id>,"role":<role>,"version":<version>,
-- "process":<value>} with the role and value written (value as stored, byte
-- for byte), in that member order: strings that come from the caller through
-- cjson.encode, numbers as decimal text
-- (string.format('%d')). cjson.encode writes numbers above 10^14 in exponent
-- form with 14 digits (1.7726007670001e+15) and orders a table's members
-- differently on each server, so it never encodes a number or a whole notice.
local mode, id, value, role = ARGV[1], ARGV[2], ARGV[3], ARGV[6]
local fenced, holder, term = 0, '', ''
if role == 'master' then
  holder = redis.pcall('GET', KEYS[3])
  if type(holder) ~= 'string' then holder = '' end
  term = redis.pcall('GET', KEYS[4])
  if type(term) ~= 'string' then term = '' end
  if holder ~= ARGV[8] or ARGV[9] == '' or term ~= ARGV[9] then
    fenced, role, value = 1, 'slave', ARGV[10]
  end
end
local current = redis.call('HGET', KEYS[1], id)
local existed = current ~= false

local t = redis.call('TIME')
local version = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = nil
if mode == 'emulated' then
  deadline = tonumber(redis.call('ZSCORE', KEYS[2], id))
  if existed and deadline and deadline <= now then existed = false end
end

-- Another live process under this id: its entry carries another
-- incarnation and was written within the quiet window. An entry that is not
-- herd's JSON, or has no incarnation, is replaced as before. The writer's
-- own last write (ARGV[13]), a heartbeat's usual find, is not decoded.
local quiet = tonumber(ARGV[12]) or 0
local own = false
if existed and ARGV[13] ~= '' then
  local suffix = ',"version":' .. ARGV[13] .. '}'
  own = string.sub(current, -#suffix) == suffix
end
if existed and ARGV[11] ~= '' and quiet > 0 and not own then
  local ok, other = pcall(cjson.decode, current)
  if ok and type(other) == 'table' and type(other.incarnation) == 'string' and other.incarnation ~= '' and
      other.incarnation ~= ARGV[11] and type(other.version) == 'number' then
    local age = math.floor((version - other.version) / 1000)
    if age < quiet then
      local who = other.identifier
      if type(who) ~= 'string' then who = '' end
      return {'in use', other.incarnation, age, who}
    end
  end
end
local last = redis.pcall('GET', KEYS[5])
-- A counter that is not a decimal below 2^53 - 1 (the largest integer a Lua
-- number holds exactly) is garbage and counts as none: the minted version is
-- then exact, and so is every one after it.
if type(last) == 'string' and string.match(last, '^%d+$') and tonumber(last) < 9007199254740991 and tonumber(last) >= version then
  version = tonumber(last) + 1
end
version = string.format('%d', version)
local announce = ARGV[5] == 'register' or not existed or fenced == 1
local writes = {{'HSET', KEYS[1], 'f', 'v'}, {'SET', KEYS[5], 'x'}}
if mode == 'native' then
  writes[1] = {'HSETEX', KEYS[1], 'PX', '1', 'FIELDS', '1', 'f', 'v'}
elseif mode == 'hpexpire' then
  writes[#writes + 1] = {'HPEXPIRE', KEYS[1], '1', 'FIELDS', '1', 'f'}
elseif mode == 'emulated' then
  writes[#writes + 1] = {'ZADD', KEYS[2], '1', 'f'}
end
if announce then
  writes[#writes + 1] = {'PUBLISH', ARGV[7], 'x'}
end
-- Every write checked against the user's ACL before the first one (writes.lua).
local denied = refused('registry put', writes)
if denied then
  return denied
end
value = string.sub(value, 1, -2) .. ',"version":' .. version .. '}'

if mode == 'native' then
  redis.call('HSETEX', KEYS[1], 'PX', ARGV[4], 'FIELDS', '1', id, value)
elseif mode == 'hpexpire' then
  redis.call('HSET', KEYS[1], id, value)
  redis.call('HPEXPIRE', KEYS[1], ARGV[4], 'FIELDS', '1', id)
elseif mode == 'emulated' then
  redis.call('HSET', KEYS[1], id, value)
  redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[4])), id)
else
  return redis.error_reply('ERR registry_put: unknown backend ' .. tostring(mode))
end
redis.call('SET', KEYS[5], version)

if announce then
  redis.call('PUBLISH', ARGV[7], '{"event":"registered","nodeId":' .. cjson.encode(id) ..
    ',"role":' .. cjson.encode(role) .. ',"version":' .. version .. ',"process":' .. value .. '}')
end
local created = 0
if not existed then created = 1 end
return {created, tonumber(version), fenced, holder, term}
