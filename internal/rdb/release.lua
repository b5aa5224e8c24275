-- release: give up the caller's mastership at once and tell the other
-- processes, so that one of them takes over without waiting for the TTL.
--
-- KEYS[1] -> <prefix>:master          (string: bare node id of the master)
-- KEYS[2] -> <prefix>:heartbeat       (string)
-- KEYS[3] -> <prefix>:master_process  (string)
-- KEYS[4] -> <prefix>:term            (string: last minted term; kept, never deleted)
-- KEYS[5] -> <prefix>:successor       (string: node id the free lock is reserved for; TTL = window)
-- KEYS[6] -> <prefix>:next            (string: the master's succession, JSON; read only)
-- ARGV[1] -> node id of the caller
-- ARGV[2] -> term of the caller's mastership as a decimal string, or "" to
--            check the node id only (as the specification's release does)
-- ARGV[3] -> events channel (<prefix>:events)
-- ARGV[4] -> node id of the successor to reserve the lock for, or "" (or
--            absent) for none
-- ARGV[5] -> the reservation's TTL in milliseconds (when ARGV[4] is set)
-- Returns: 1 when released (and announced, with "to" naming the successor
--          when there is one); 0 when the lock was not the caller's, in
--          which case nothing is changed.
--
-- Who hears of the release: the successor a Transfer named, on its own
-- channel (<events>:<id>, Keys.Turn); else, when KEYS[6] holds the
-- succession of the released term, the slaves it ranks (the first three), on
-- their own channels, in rank order; else every process, on the events
-- channel. A release the whole herd hears makes every reader wake for one
-- contender: a herd of a thousand pays a thousand wake-ups and the one that
-- matters waits its turn among them. The others learn of the new master from
-- its acquired notice, or of a free lock at their next check.
--
-- The notice is JSON built in a fixed member order: strings that come from
-- the caller or from Redis through cjson.encode, numbers as decimal text
-- (string.format('%d')). cjson.encode writes numbers above 10^14 in exponent
-- form with 14 digits (1.7726007670001e+15) and orders a table's members
-- differently on each server, so it never encodes a number or a whole notice.
-- The term is the term key's text when it is a decimal integer (acquire
-- writes it so), else 0.
local holder = redis.pcall('GET', KEYS[1])
if holder ~= ARGV[1] then return 0 end
local term = redis.pcall('GET', KEYS[4])
if ARGV[2] ~= '' and term ~= ARGV[2] then return 0 end
if type(term) ~= 'string' or not string.match(term, '^[1-9]%d*$') then term = '0' end

-- Who hears of it (see above): the channels, in the order published.
local channels = {}
if ARGV[4] and ARGV[4] ~= '' then
  channels = {ARGV[3] .. ':' .. ARGV[4]}
else
  local ok, nxt = pcall(function() return cjson.decode(redis.call('GET', KEYS[6])) end)
  if ok and type(nxt) == 'table' and type(nxt.order) == 'table' and type(nxt.term) == 'number'
      and string.format('%d', nxt.term) == term then
    for i = 1, 3 do
      local id = nxt.order[i]
      if type(id) ~= 'string' or id == '' then break end
      channels[i] = ARGV[3] .. ':' .. id
    end
  end
end
if #channels == 0 then channels = {ARGV[3]} end

-- Every write checked against the user's ACL before the first one (writes.lua).
local writes = {{'DEL', KEYS[1]}, {'DEL', KEYS[2]}, {'DEL', KEYS[3]}, {'SET', KEYS[5], 'x'}}
for _, ch in ipairs(channels) do
  writes[#writes + 1] = {'PUBLISH', ch, 'x'}
end
local denied = refused('release', writes)
if denied then
  return denied
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local to = ''
if ARGV[4] and ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[5])
  to = ',"to":' .. cjson.encode(ARGV[4])
end
local notice = '{"event":"released","nodeId":' .. cjson.encode(ARGV[1]) .. ',"term":' .. term .. to .. '}'
for _, ch in ipairs(channels) do
  redis.call('PUBLISH', ch, notice)
end
return 1
