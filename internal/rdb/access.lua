-- access: which of the commands the election runs on its keys and channels
-- the current user's ACL refuses, asked once at Start so that a user who can
-- never work (no PUBLISH, no SUBSCRIBE, a key pattern that leaves out the
-- term key) is told at once, by name, instead of failing at every turn.
-- It writes nothing. It needs redis.acl_check_cmd (Redis 7.0 and later,
-- Valkey); on an older server it answers {} (nothing known to be refused).
--
-- KEYS[1] -> <prefix>:master
-- KEYS[2] -> <prefix>:heartbeat
-- KEYS[3] -> <prefix>:master_process
-- KEYS[4] -> <prefix>:term
-- KEYS[5] -> <prefix>:successor
-- KEYS[6] -> <prefix>:processes
-- KEYS[7] -> <prefix>:processes:expiry
-- KEYS[8] -> <prefix>:processes:version
-- KEYS[9] -> <prefix>:next
-- ARGV[1] -> events channel (<prefix>:events)
-- ARGV[2] -> registry events channel (<prefix>:registry-events)
-- ARGV[3] -> the process's own notice channel (<prefix>:events:<node id>),
--            or absent
-- Returns: the refused commands, each as "COMMAND key-or-channel", in the
--          order below; {} when none is.
if not redis.acl_check_cmd then return {} end
local checks = {
  {'GET', KEYS[1]}, {'SET', KEYS[1], 'x'}, {'DEL', KEYS[1]}, {'PTTL', KEYS[1]}, {'PEXPIRE', KEYS[1], '1'},
  {'SET', KEYS[2], 'x'}, {'PEXPIRE', KEYS[2], '1'}, {'DEL', KEYS[2]},
  {'SET', KEYS[3], 'x'}, {'PEXPIRE', KEYS[3], '1'}, {'DEL', KEYS[3]},
  {'GET', KEYS[4]}, {'SET', KEYS[4], 'x'},
  {'GET', KEYS[5]}, {'SET', KEYS[5], 'x'}, {'DEL', KEYS[5]},
  {'HGETALL', KEYS[6]}, {'HEXISTS', KEYS[6], 'f'}, {'HSET', KEYS[6], 'f', 'v'}, {'HDEL', KEYS[6], 'f'},
  {'GET', KEYS[8]}, {'SET', KEYS[8], 'x'},
  {'GET', KEYS[9]}, {'SET', KEYS[9], 'x'},
  {'TIME'},
  {'PUBLISH', ARGV[1], 'x'}, {'SUBSCRIBE', ARGV[1]},
  {'PUBLISH', ARGV[2], 'x'}, {'SUBSCRIBE', ARGV[2]},
  {'UNSUBSCRIBE', ARGV[1]},
}
if ARGV[3] then
  checks[#checks + 1] = {'PUBLISH', ARGV[3], 'x'}
  checks[#checks + 1] = {'SUBSCRIBE', ARGV[3]}
end
local refused = {}
for _, cmd in ipairs(checks) do
  if not redis.acl_check_cmd(unpack(cmd)) then
    refused[#refused + 1] = cmd[1] .. (cmd[2] and (' ' .. cmd[2]) or '')
  end
end
return refused
