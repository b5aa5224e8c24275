-- inbox_move: move entries of one durable inbox to other inboxes (the
-- reassignment of a removed slave's work), but only while the sender still
-- holds the master lock under its term: the same fence as route.lua, in the
-- same atomic step as the moves. Each moved entry is added to its new inbox
-- with the caller's term, its envelope unchanged and its delivery count so
-- far, and acknowledged and deleted in the old one. When the old inbox is
-- empty afterwards it is deleted, consumer group and all, and its id leaves
-- the set of inboxes; the ids of the inboxes written join it.
--
-- KEYS[1] -> <prefix>:master  (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term    (string: last minted term)
-- KEYS[3] -> <prefix>:inboxes (set: process ids with an inbox)
-- KEYS[4] -> the inbox to move from (stream <prefix>:inbox:<id>)
-- KEYS[5..] -> the inboxes to move to
-- ARGV[1] -> node id of the sender
-- ARGV[2] -> the sender's term, as a decimal string
-- ARGV[3] -> the inboxes' consumer group
-- ARGV[4] -> the inbox name prefix (<prefix>:inbox:); what follows it in an
--            inbox key is the process id
-- ARGV[2i+3] -> the id of entry i in KEYS[4], for i = 1 .. n
-- ARGV[2i+4] -> the destination of entry i: an index into KEYS, 5 or more
-- The new entry has the fields t (ARGV[2]), d (the deliveries so far: the
-- old entry's d plus its delivery count in the old inbox's group) and m.
-- Returns: an array with, for each entry in order, the id of its new entry;
--          the integer 0 when the entry was no longer in the old inbox
--          (acknowledged meanwhile); the integer -2 when it had no m field
--          (not written by herd: deleted, not moved). Or the integer -1, and
--          nothing is moved, when the lock is not the sender's under that
--          term. An error when ARGV does not come in pairs, names a bad
--          destination, or an inbox key does not start with ARGV[4].
if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR inbox_move: ARGV after the node id, term, group and prefix must be entry id, destination pairs')
end
local prefix = ARGV[4]
local err = notInbox('inbox_move', prefix, 4)
if err then
  return err
end
for i = 6, #ARGV, 2 do
  local d = tonumber(ARGV[i])
  if d == nil or d < 5 or d > #KEYS then
    return redis.error_reply('ERR inbox_move: destination ' .. ARGV[i] .. ' is not an index of KEYS[5..' .. #KEYS .. ']')
  end
end
-- The fence, then every write checked against the user's ACL before the
-- first one (writes.lua).
local stop = fencedWrites('inbox move', {{'XACK', KEYS[4], ARGV[3], '0-1'}, {'XDEL', KEYS[4], '0-1'}, {'DEL', KEYS[4]},
  {'SADD', KEYS[3], 'x'}, {'SREM', KEYS[3], 'x'}}, 5)
if stop then
  return stop
end
local out = {}
local joined = {}
for i = 5, #ARGV, 2 do
  local id = ARGV[i]
  local e = redis.call('XRANGE', KEYS[4], id, id)
  if #e == 0 then
    out[#out + 1] = 0
  else
    local f = e[1][2]
    local m, d = nil, 0
    for j = 1, #f, 2 do
      if f[j] == 'm' then
        m = f[j + 1]
      elseif f[j] == 'd' then
        d = tonumber(f[j + 1]) or 0
      end
    end
    local p = redis.pcall('XPENDING', KEYS[4], ARGV[3], id, id, 1)
    if type(p) == 'table' and #p == 1 then
      d = d + p[1][4]
    end
    if m == nil then
      out[#out + 1] = -2
    else
      local to = KEYS[tonumber(ARGV[i + 1])]
      out[#out + 1] = redis.call('XADD', to, '*', 't', ARGV[2], 'd', tostring(d), 'm', m)
      if not joined[to] then
        joined[to] = true
        redis.call('SADD', KEYS[3], string.sub(to, #prefix + 1))
      end
    end
    redis.pcall('XACK', KEYS[4], ARGV[3], id)
    redis.call('XDEL', KEYS[4], id)
  end
end
if redis.call('XLEN', KEYS[4]) == 0 then
  redis.call('DEL', KEYS[4])
  redis.call('SREM', KEYS[3], string.sub(KEYS[4], #prefix + 1))
end
return out
