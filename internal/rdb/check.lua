-- check (the specification's checkMasterExists): who is master now, under
-- which term, and for how much longer, in one round trip.
--
-- KEYS[1] -> <prefix>:master  (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term    (string: last minted term)
-- KEYS[3] -> <prefix>:next    (string: the master's succession, JSON)
-- Returns: {holder, term, pttl, next}: holder is the master's node id ("" when no
--          master holds the lock, or when the key holds something that is not a
--          string), term the raw content of the term key ("" when it is missing,
--          "!<type>" when it is not a string), pttl the lock's remaining time to live in
--          milliseconds (-2: there is no lock; -1: the lock has no TTL), next
--          the raw succession ("" when missing or not a string).
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then holder = '' end
local term = redis.pcall('GET', KEYS[2])
if type(term) == 'table' then
  term = '!' .. redis.call('TYPE', KEYS[2])['ok'] -- not a string: its type, marked
elseif type(term) ~= 'string' then
  term = ''
end
local nxt = redis.pcall('GET', KEYS[3])
if type(nxt) ~= 'string' then nxt = '' end
return {holder, term, redis.call('PTTL', KEYS[1]), nxt}
