-- next: store the master's succession (the slaves that contend first when
-- its lock is released or expires), only while the writer still holds the
-- lock under the term the succession is for: a deposed master's write,
-- late after a pause, would replace its successor's.
--
-- KEYS[1] -> <prefix>:master  (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term    (string: last minted term)
-- KEYS[3] -> <prefix>:next    (string: the succession, JSON)
-- ARGV[1] -> node id of the writer
-- ARGV[2] -> the writer's term, as a decimal string
-- ARGV[3] -> the succession (JSON {"term":<ARGV[2]>,"order":[ids]})
-- Returns: 1 when written; 0, and nothing is written, when the lock is not
--          the writer's under that term.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[3], ARGV[3])
return 1
