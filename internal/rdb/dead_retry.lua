-- dead_retry: an operator sends a dead letter again: it is added to the
-- inbox of a live process under the term current now, with its deliveries
-- counted from zero again, and deleted from the dead-letter stream, in one
-- atomic step. The term is the term key's value, the current master's, so
-- a slave that knows that term accepts the entry: an operator's retry counts
-- as an order of the current master. It is not fenced by the lock, since
-- the operator is no master.
--
-- KEYS[1] -> <prefix>:dead              (stream: the dead letters)
-- KEYS[2] -> <prefix>:term              (string: last minted term)
-- KEYS[3] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[4] -> <prefix>:processes:expiry  (sorted set: process id -> deadline
--                                        in ms; emulated registry only)
-- KEYS[5] -> <prefix>:inboxes           (set: process ids with an inbox)
-- KEYS[6] -> the inbox to add the entry to (stream <prefix>:inbox:<id>)
-- ARGV[1] -> the id of the dead letter in KEYS[1]
-- ARGV[2] -> the process id of KEYS[6]
-- Returns: the id of the new inbox entry; the integer 0 when the dead letter
--          does not exist; -3 when the process is not live in the registry;
--          -4 when no term was ever minted (nothing done in each case).
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then
  return 0
end
local id = ARGV[2]
if not isLive(KEYS[3], KEYS[4], id) then
  return -3
end
local term = redis.pcall('GET', KEYS[2])
if type(term) ~= 'string' or not string.match(term, '^%d+$') then
  return -4
end
-- Every write checked against the user's ACL before the first one (writes.lua).
local denied = refused('dead retry', {{'XADD', KEYS[6], '*', 't', '0', 'm', 'x'}, {'SADD', KEYS[5], 'x'},
  {'XDEL', KEYS[1], '0-1'}})
if denied then
  return denied
end
local m = nil
local f = e[1][2]
for j = 1, #f, 2 do
  if f[j] == 'm' then
    m = f[j + 1]
  end
end
local new = redis.call('XADD', KEYS[6], '*', 't', term, 'm', m or '')
redis.call('SADD', KEYS[5], id)
redis.call('XDEL', KEYS[1], ARGV[1])
return new
