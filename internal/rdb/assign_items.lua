-- assign_items: add items to, or remove items from, an item set and count
-- the change in its version, in one atomic step, unless the set was lost: a
-- caller that knows the set had items (a Planner's copy) is refused when
-- neither the items nor the version exist, so that a change made before
-- the master puts the set back (assign_restore) cannot pass for the whole
-- set and keep the rest from coming back.
--
-- KEYS[1] -> <prefix>:assign:<set>:items      (set: the items)
-- KEYS[2] -> <prefix>:assign:<set>:version    (string: a counter every change
--            of the items increments)
-- ARGV[1] -> "add" or "remove"
-- ARGV[2] -> "known" when the caller knows the set had items, else "new"
-- ARGV[3..] -> the items (at least one)
-- Returns: the version after the change, or -1, and nothing is written, when
--          the set is lost. An error, and nothing written, when the version
--          key holds something INCR cannot count.
local op, known = ARGV[1], ARGV[2]
if (op ~= 'add' and op ~= 'remove') or (known ~= 'known' and known ~= 'new') or #ARGV < 3 then
  return redis.error_reply('ERR assign_items: want add or remove, known or new, and items')
end
if known == 'known' and redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
local version = redis.pcall('GET', KEYS[2])
if type(version) == 'table' or (version and not tonumber(version)) then
  return redis.error_reply('ERR assign_items: ' .. KEYS[2] .. ' holds no count; delete it (SetItems writes it again)')
end
local cmd = 'SADD'
if op == 'remove' then
  cmd = 'SREM'
end
local denied = refused('assign items', {{cmd, KEYS[1], 'x'}, {'INCR', KEYS[2]}})
if denied then
  return denied
end
for i = 3, #ARGV, 5000 do
  redis.call(cmd, KEYS[1], unpack(ARGV, i, math.min(i + 4999, #ARGV)))
end
return redis.call('INCR', KEYS[2])
