-- assign_restore: put back the items of an item set that Redis lost (a
-- restart without persistence, a failover that dropped recent writes), from
-- the copy the master's Planner kept, only while the caller holds the master
-- lock under its term, and only when the set is missing: neither its items
-- nor its version exist. A set emptied on purpose keeps its version, so it
-- stays empty.
--
-- KEYS[1] -> <prefix>:master                  (string: node id of the master)
-- KEYS[2] -> <prefix>:term                    (string: last minted term)
-- KEYS[3] -> <prefix>:assign:<set>:items      (set: the items)
-- KEYS[4] -> <prefix>:assign:<set>:version    (string: a counter every change
--            of the items increments)
-- ARGV[1] -> node id of the caller
-- ARGV[2] -> the caller's term, as a decimal string
-- ARGV[3..] -> the items to put back (at least one)
-- Returns: 1 when the items were put back (the version is then the server's
--          time in ms: above any count the lost set reached, so that no
--          Planner takes its old copy for current), 0 when
--          the set exists and nothing was written, -1 when the lock is not
--          the caller's under that term and nothing was written.
if #ARGV < 3 then
  return redis.error_reply('ERR assign_restore: no items to put back')
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
if redis.call('EXISTS', KEYS[3]) == 1 or redis.call('EXISTS', KEYS[4]) == 1 then
  return 0
end
local err = refused('assign_restore', {{'SADD', KEYS[3], 'x'}, {'SET', KEYS[4], '1'}})
if err then
  return err
end
for i = 3, #ARGV, 5000 do
  redis.call('SADD', KEYS[3], unpack(ARGV, i, math.min(i + 4999, #ARGV)))
end
local t = redis.call('TIME')
redis.call('SET', KEYS[4], tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
return 1
