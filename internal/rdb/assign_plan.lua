-- assign_plan: write changes to the assignment plan of one item set, but only
-- while the caller holds the master lock under its term: the same fence as
-- route.lua, in the same atomic step as the writes. The plan is a hash (item
-- -> slave id) and, per slave, the set of the items planned for it, which is
-- what the slave's assign_sync reads. Each slave whose set changed is told
-- by a PUBLISH of "plan" on the channel named as its set (the Worker's
-- notice channel): a hint that makes it sync at once, best effort.
--
-- KEYS[1] -> <prefix>:master                   (string: node id of the master)
-- KEYS[2] -> <prefix>:term                     (string: last minted term)
-- KEYS[3] -> <prefix>:assign:<set>:plan        (hash: item -> slave id)
-- KEYS[4..] -> <prefix>:assign:<set>:plan:<id> (set: the items planned for
--              slave <id>), one for every slave a change names, as old or
--              new owner
-- ARGV[1] -> node id of the caller
-- ARGV[2] -> the caller's term, as a decimal string
-- ARGV[3] -> the prefix of the per-slave sets (<prefix>:assign:<set>:plan:)
-- ARGV[4..] -> pairs: item, new owner ("" to leave the item unassigned)
-- Returns: the number of items whose owner changed, or -1, and nothing is
--          written, when the lock is not the caller's under that term. An
--          error, and nothing written, when a per-slave set the change needs
--          is not among KEYS.
if (#ARGV - 3) % 2 ~= 0 then
  return redis.error_reply('ERR assign_plan: ARGV after the node id, term and prefix must be item, owner pairs')
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
local declared = {}
for i = 4, #KEYS do
  declared[KEYS[i]] = true
end
-- Check every key and write before the first write.
local writes = {{'HSET', KEYS[3], 'i', 'x'}, {'HDEL', KEYS[3], 'i'}}
local prefix = ARGV[3]
-- planned(slave, op) returns the plan set of slave (nil for '': no owner)
-- after adding op on it (SREM or SADD) to the writes to check; or nil and an
-- error reply when that set is not among KEYS.
local function planned(slave, op)
  if slave == '' then
    return nil
  end
  local k = prefix .. slave
  if not declared[k] then
    return nil, redis.error_reply('ERR assign_plan: the plan set ' .. k .. ' is not among KEYS')
  end
  writes[#writes + 1] = {op, k, 'x'}
  return k
end
local changes = {}
for i = 4, #ARGV, 2 do
  local item, to = ARGV[i], ARGV[i + 1]
  local from = redis.call('HGET', KEYS[3], item)
  if not from then
    from = ''
  end
  if from ~= to then
    local fk, bad = planned(from, 'SREM')
    if bad then
      return bad
    end
    local tk
    tk, bad = planned(to, 'SADD')
    if bad then
      return bad
    end
    changes[#changes + 1] = {item, fk, tk, to}
  end
end
local denied = refused('assign plan', writes)
if denied then
  return denied
end
local told = {}
local function tell(k)
  if k and not told[k] then
    told[#told + 1] = k
    told[k] = true
  end
end
for _, c in ipairs(changes) do
  if c[2] then
    redis.call('SREM', c[2], c[1])
  end
  if c[3] then
    redis.call('SADD', c[3], c[1])
    redis.call('HSET', KEYS[3], c[1], c[4])
  else
    redis.call('HDEL', KEYS[3], c[1])
  end
  tell(c[2])
  tell(c[3])
end
-- pcall: a notice the user may not publish costs the push, not the plan.
for _, k in ipairs(told) do
  redis.pcall('PUBLISH', k, 'plan')
end
return #changes
