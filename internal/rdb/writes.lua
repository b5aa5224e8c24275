-- writes: the prelude of every script that writes (scripts.go prepends it):
-- the helpers those scripts share.
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

-- fencedWrites(script, writes, first, more) is where an inbox script stops
-- before its first write: it returns -1 when the master lock (KEYS[1]) is
-- not the caller's (ARGV[1]) under its term (ARGV[2], the term key being
-- KEYS[2]), else refused's NOPERM error reply when the user may not make one
-- of writes, an XADD to each inbox of KEYS[first..] or, for each of them,
-- the writes more(key) returns (more may be nil), else nil: the script goes
-- on.
local function fencedWrites(script, writes, first, more)
  if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
    return -1
  end
  for i = first, #KEYS do
    writes[#writes + 1] = {'XADD', KEYS[i], '*', 't', '0', 'm', 'x'}
    if more then
      for _, cmd in ipairs(more(KEYS[i])) do
        writes[#writes + 1] = cmd
      end
    end
  end
  return refused(script, writes)
end

-- notInbox(script, prefix, first) returns the error reply naming the first of
-- KEYS[first..] that is not an inbox key (prefix, the inbox name prefix
-- <prefix>:inbox:, followed by a process id), or nil. A script checks its
-- inbox keys with it before it reads or writes any key.
local function notInbox(script, prefix, first)
  for i = first, #KEYS do
    if string.sub(KEYS[i], 1, #prefix) ~= prefix or #KEYS[i] == #prefix then
      return redis.error_reply('ERR ' .. script .. ': key ' .. KEYS[i] .. ' is not an inbox under ' .. prefix)
    end
  end
  return nil
end

-- isLive(processes, expiry, id) tells whether process id is live in the
-- registry: it has an entry in the hash processes (<prefix>:processes) and
-- its deadline in the sorted set expiry (<prefix>:processes:expiry, in ms;
-- emulated registry only), when it has one, has not passed. expiry is nil
-- when the caller knows the registry keeps no deadlines there (its backend
-- has Redis expire each entry). The server's clock is read once per
-- script, when a deadline is first compared.
local nowMs
local function isLive(processes, expiry, id)
  if redis.call('HEXISTS', processes, id) == 0 then
    return false
  end
  local deadline = expiry and redis.call('ZSCORE', expiry, id)
  if not deadline then
    return true
  end
  if not nowMs then
    local t = redis.call('TIME')
    nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return tonumber(deadline) > nowMs
end
