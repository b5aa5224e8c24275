-- route: publish one routed message to one or more slave channels, but only
-- while the sender still holds the master lock under the term stamped on the
-- message. This is send-side fencing: a master that lost its lock (paused,
-- partitioned, replaced) cannot get a message out, whatever it believes.
--
-- KEYS[1] -> <prefix>:master  (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term    (string: last minted term)
-- ARGV[1] -> node id of the sender
-- ARGV[2] -> the sender's term, as a decimal string
-- ARGV[3] -> the message (the JSON envelope)
-- ARGV[4..n] -> the channels to publish to (worker:slave:<id>)
-- Returns: an array with, for each channel in order, the number of
--          subscribers that received the message; or the integer -1, and
--          nothing is published, when the lock is not the sender's under that term.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
local counts = {}
for i = 4, #ARGV do
  counts[#counts + 1] = redis.call('PUBLISH', ARGV[i], ARGV[3])
end
return counts
