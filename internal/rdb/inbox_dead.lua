-- inbox_dead: a Consumer gives up on one entry of its inbox after too many
-- deliveries: the entry moves to the dead-letter stream with why, and is
-- acknowledged and deleted in the inbox, in one atomic step, so it is
-- neither lost nor delivered again. It is not fenced by the lock: the entry
-- is the consumer's own, and the master's moves (inbox_move.lua,
-- inbox_adopt.lua) and this script each find the entry or do nothing.
--
-- KEYS[1] -> the inbox (stream <prefix>:inbox:<id>)
-- KEYS[2] -> <prefix>:dead (stream: the dead letters)
-- ARGV[1] -> the inboxes' consumer group
-- ARGV[2] -> the entry id in KEYS[1]
-- ARGV[3] -> the process that gives up (the consumer's process id)
-- ARGV[4] -> the deliveries of the entry, all inboxes included, decimal
-- ARGV[5] -> the last error, as text
-- The dead letter has the fields m (the envelope), t (the term the entry was
-- written under), d (ARGV[4]), e (ARGV[5]), p (ARGV[3]) and i (KEYS[1]).
-- Returns: the id of the dead letter; or the integer 0 when the entry is no
--          longer in the inbox (moved or acknowledged meanwhile: nothing done).
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #e == 0 then
  return 0
end
-- Every write checked against the user's ACL before the first one (writes.lua).
local denied = refused('inbox dead', {{'XADD', KEYS[2], '*', 'm', 'x'}, {'XACK', KEYS[1], ARGV[1], '0-1'},
  {'XDEL', KEYS[1], '0-1'}})
if denied then
  return denied
end
local f = e[1][2]
local m, t = '', ''
for j = 1, #f, 2 do
  if f[j] == 'm' then
    m = f[j + 1]
  elseif f[j] == 't' then
    t = f[j + 1]
  end
end
local id = redis.call('XADD', KEYS[2], '*', 'm', m, 't', t, 'd', ARGV[4], 'e', ARGV[5], 'p', ARGV[3], 'i', KEYS[1])
redis.pcall('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return id
