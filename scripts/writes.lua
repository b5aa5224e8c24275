-- writes: the prelude of every script that writes (scripts.go prepends it).
--
-- refused(script, cmds) checks each write the script may make, given as a
-- command with its key ({'SET', KEYS[1], 'x'}), against the user's ACL
-- (redis.acl_check_cmd: Redis 7.0 and later, Valkey) and returns the NOPERM
-- error reply naming the first refused one, or nil. A script calls it before
-- its first write: Redis stops a script at a refused command but keeps the
-- writes before it, so checking first leaves Redis as the script found it.
-- Servers without acl_check_cmd (miniredis) are not checked.
local function refused(script, cmds)
  if not redis.acl_check_cmd then
    return nil
  end
  for _, cmd in ipairs(cmds) do
    if not redis.acl_check_cmd(unpack(cmd)) then
      return redis.error_reply('NOPERM this user has no permissions to run ' .. cmd[1] .. ' ' .. cmd[2] ..
        ' (herd ' .. script .. ' script; nothing was written)')
    end
  end
  return nil
end
