-- release: give up the caller's mastership at once and tell the other
-- processes, so that one of them takes over without waiting for the TTL.
--
-- KEYS[1] -> <prefix>:master          (string: bare node id of the master)
-- KEYS[2] -> <prefix>:heartbeat       (string)
-- KEYS[3] -> <prefix>:master_process  (string)
-- KEYS[4] -> <prefix>:term            (string: last minted term; kept, never deleted)
-- KEYS[5] -> <prefix>:successor       (string: node id the free lock is reserved for; TTL = window)
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

-- Every write checked against the user's ACL before the first one (writes.lua).
local denied = refused('release', {{'DEL', KEYS[1]}, {'DEL', KEYS[2]}, {'DEL', KEYS[3]}, {'SET', KEYS[5], 'x'},
    {'PUBLISH', ARGV[3], 'x'}})
if denied then
  return denied
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local to = ''
if ARGV[4] and ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[5])
  to = ',"to":' .. cjson.encode(ARGV[4])
end
redis.call('PUBLISH', ARGV[3], '{"event":"released","nodeId":' .. cjson.encode(ARGV[1]) .. ',"term":' .. term .. to .. '}')
return 1
