-- route_batch: publish a batch of routed messages, each to its own channel,
-- but only while the sender still holds the master lock under the term
-- stamped on all of them. One fencing check covers the whole batch, and the
-- check and every PUBLISH are one atomic step: either all the messages are
-- published, in order, or none is.
--
-- KEYS[1] -> <prefix>:master  (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term    (string: last minted term)
-- ARGV[1] -> node id of the sender
-- ARGV[2] -> the sender's term, as a decimal string
-- ARGV[2i+1] -> the channel of message i, for i = 1 .. n (worker:slave:<id>)
-- ARGV[2i+2] -> message i (its JSON envelope)
-- Returns: an array with, for each message in order, the number of
--          subscribers that received it; or the integer -1, and nothing is
--          published, when the lock is not the sender's under that term.
--          An error when the channels and messages do not come in pairs.
if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR route_batch: ARGV after the node id and term must be channel, message pairs, got ' .. (#ARGV - 2) .. ' values')
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
local counts = {}
for i = 3, #ARGV, 2 do
  counts[#counts + 1] = redis.call('PUBLISH', ARGV[i], ARGV[i + 1])
end
return counts
