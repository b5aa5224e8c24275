-- inbox_send: add routed messages to the slaves' durable inboxes (Redis
-- Streams), but only while the sender still holds the master lock under the
-- term stamped on them: the same fence as route.lua, checked in the same
-- atomic step as the XADD commands. An inbox that already holds the most
-- entries allowed is not written (its message is refused); the others are.
--
-- KEYS[1] -> <prefix>:master  (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term    (string: last minted term)
-- KEYS[i+2] -> the inbox of message i, for i = 1 .. n (stream <prefix>:inbox:<id>;
--              a key may appear more than once)
-- ARGV[1] -> node id of the sender
-- ARGV[2] -> the sender's term, as a decimal string
-- ARGV[3] -> the most entries an inbox may hold after the call (0: no limit)
-- ARGV[i+3] -> message i (its JSON envelope), for i = 1 .. n
-- Each entry gets the fields t (the term, ARGV[2]) and m (the envelope).
-- Returns: an array with, for each message in order, the id of its new
--          entry, or the integer 0 when its inbox was full (nothing added for
--          it); or the integer -1, and nothing is added, when the lock is not
--          the sender's under that term. An error when KEYS and ARGV do not
--          pair up.
if #KEYS - 2 ~= #ARGV - 3 or #KEYS < 3 then
  return redis.error_reply('ERR inbox_send: want one inbox key per message, got ' .. (#KEYS - 2) .. ' keys and ' .. (#ARGV - 3) .. ' messages')
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
local cap = tonumber(ARGV[3]) or 0
local len = {}
local ids = {}
for i = 3, #KEYS do
  local k = KEYS[i]
  if cap > 0 and len[k] == nil then
    len[k] = redis.call('XLEN', k)
  end
  if cap > 0 and len[k] >= cap then
    ids[#ids + 1] = 0
  else
    ids[#ids + 1] = redis.call('XADD', k, '*', 't', ARGV[2], 'm', ARGV[i + 1])
    if cap > 0 then
      len[k] = len[k] + 1
    end
  end
end
return ids
