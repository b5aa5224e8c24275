-- check (the specification's checkMasterExists): who is master now, under
-- which term, and for how much longer, in one round trip.
--
-- KEYS[1] -> <prefix>:master  (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term    (string: last minted term)
-- Returns: {holder, term, pttl}: holder is the master's node id ("" when no
--          master holds the lock, or when the key holds something that is not a
--          string), term the raw content of the term key ("" when it is missing,
--          "!<type>" when it is not a string), pttl the lock's remaining time to live in
--          milliseconds (-2: there is no lock; -1: the lock has no TTL).
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then holder = '' end
local term = redis.pcall('GET', KEYS[2])
if type(term) == 'table' then
  term = '!' .. redis.call('TYPE', KEYS[2])['ok'] -- not a string: its type, marked
elseif type(term) ~= 'string' then
  term = ''
end
return {holder, term, redis.call('PTTL', KEYS[1])}
