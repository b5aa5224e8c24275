-- handback: take the herd's one hand-back of a window for the master that
-- calls it, only while it holds the lock under its term: a master hands
-- over to a process of higher priority (masterelection.Config.Priority)
-- only after this succeeds, so that at most one such hand-over happens per
-- window whichever master makes it (each hand-over elects a new one).
--
-- KEYS[1] -> <prefix>:master   (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term     (string: last minted term)
-- KEYS[3] -> <prefix>:handback (string: the term of the last hand-back, with
--                               the window as TTL)
-- ARGV[1] -> node id of the caller
-- ARGV[2] -> the caller's term, as a decimal string
-- ARGV[3] -> the window (milliseconds)
-- Returns: {1, 0} when taken (KEYS[3] set to ARGV[2] for ARGV[3] ms);
--          {0, pttl} when a hand-back of the window was taken already,
--          pttl being its remaining TTL (ms; -1 for a key without TTL);
--          {-1, 0}, and nothing is written, when the lock is not the
--          caller's under that term.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return {-1, 0}
end
if redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[3])}
