-- inbox_send: add routed messages to the slaves' durable inboxes (Redis
-- Streams), but only while the sender still holds the master lock under the
-- term stamped on them: the same fence as route.lua, checked in the same
-- atomic step as the XADD commands. A message is added only to the inbox of
-- a live process (an entry in the registry whose deadline, when it has one,
-- has not passed), so nothing is stored where no process will read it; and
-- an inbox that already holds the most entries allowed is not written. The
-- other messages of the call are added.
--
-- KEYS[1] -> <prefix>:master            (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term              (string: last minted term)
-- KEYS[3] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[4] -> <prefix>:processes:expiry  (sorted set: process id -> deadline
--                                        in ms; emulated registry only)
-- KEYS[5] -> <prefix>:inboxes           (set: process ids with an inbox)
-- KEYS[i+5] -> the inbox of message i, for i = 1 .. n (stream
--              <prefix>:inbox:<id>; a key may appear more than once)
-- ARGV[1] -> node id of the sender
-- ARGV[2] -> the sender's term, as a decimal string
-- ARGV[3] -> the most entries an inbox may hold after the call (0: no limit)
-- ARGV[4] -> the inbox name prefix (<prefix>:inbox:); what follows it in an
--            inbox key is the process id
-- ARGV[i+4] -> message i (its JSON envelope), for i = 1 .. n
-- Each entry gets the fields t (the term, ARGV[2]) and m (the envelope).
-- Returns: an array with, for each message in order, the id of its new
--          entry; the integer 0 when its inbox was full; the integer -3 when
--          its process is not live in the registry (nothing added for either).
--          Or the integer -1, and nothing is added, when the lock is not the
--          sender's under that term. An error when KEYS and ARGV do not pair
--          up or an inbox key does not start with ARGV[4].
if #KEYS - 5 ~= #ARGV - 4 or #KEYS < 6 then
  return redis.error_reply('ERR inbox_send: want one inbox key per message, got ' .. (#KEYS - 5) .. ' keys and ' .. (#ARGV - 4) .. ' messages')
end
local prefix = ARGV[4]
-- The inbox keys checked, then the fence, then every write checked against
-- the user's ACL before the first one (writes.lua).
local stop = notInbox('inbox_send', prefix, 6) or fencedWrites('inbox send', {{'SADD', KEYS[5], 'x'}}, 6)
if stop then
  return stop
end
local live = {}
local cap = tonumber(ARGV[3]) or 0
local len = {}
local ids = {}
for i = 6, #KEYS do
  local k = KEYS[i]
  local id = string.sub(k, #prefix + 1)
  if live[id] == nil then
    live[id] = isLive(KEYS[3], KEYS[4], id)
    if live[id] then
      redis.call('SADD', KEYS[5], id)
    end
  end
  if cap > 0 and len[k] == nil then
    len[k] = redis.call('XLEN', k)
  end
  if not live[id] then
    ids[#ids + 1] = -3
  elseif cap > 0 and len[k] >= cap then
    ids[#ids + 1] = 0
  else
    ids[#ids + 1] = redis.call('XADD', k, '*', 't', ARGV[2], 'm', ARGV[i - 1])
    if cap > 0 then
      len[k] = len[k] + 1
    end
  end
end
return ids
