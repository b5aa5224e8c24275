-- renew: extend the caller's mastership by one lock TTL, but only while the
-- lock is still the caller's.
--
-- KEYS[1] -> <prefix>:master          (string: bare node id of the master)
-- KEYS[2] -> <prefix>:heartbeat       (string: server time of the last renewal, ms since the epoch)
-- KEYS[3] -> <prefix>:master_process  (string: the master's ProcessInfo JSON)
-- KEYS[4] -> <prefix>:term            (string: last minted term)
-- ARGV[1] -> node id of the caller
-- ARGV[2] -> lock TTL (milliseconds)
-- ARGV[3] -> term of the caller's mastership as a decimal string, or "" to
--            check the node id only (as the specification's renew does)
-- Returns: 1 when renewed; 0 when the lock is not held by this node id (and
--          term), including when a key holds something that is not a string.
local holder = redis.pcall('GET', KEYS[1])
if holder ~= ARGV[1] then return 0 end
if ARGV[3] ~= '' and redis.pcall('GET', KEYS[4]) ~= ARGV[3] then return 0 end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], string.format('%d', now), 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return 1
