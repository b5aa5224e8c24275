-- inbox_send: add routed messages to the slaves' durable inboxes (Redis
-- Streams), but only while the sender still holds the master lock under the
-- term stamped on them: the same fence as route.lua, checked in the same
-- atomic step as the XADD commands. A message is added only to the inbox of
-- a live process (an entry in the registry whose deadline, when it has one,
-- has not passed), so nothing is stored where no process will read it; and
-- an inbox that already holds the most entries allowed is not written. The
-- other messages of the call are added.
--
-- KEYS[1] -> <prefix>:master            (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term              (string: last minted term)
-- KEYS[3] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[4] -> <prefix>:inboxes           (set: process ids with an inbox)
-- KEYS[5] -> <prefix>:processes:expiry  (sorted set: process id -> deadline
--                                        in ms), when the registry keeps
--                                        its deadlines there (the emulated
--                                        backend) or the caller cannot tell;
--                                        left out when its backend has
--                                        Redis expire entries itself
-- KEYS[f+i] -> the inbox of message i, for i = 1 .. n, f being 4, or 5 with
--              the deadlines (stream <prefix>:inbox:<id>; a key may appear
--              more than once)
-- ARGV[1] -> node id of the sender
-- ARGV[2] -> the sender's term, as a decimal string
-- ARGV[3] -> the most entries an inbox may hold after the call (0: no limit)
-- ARGV[4] -> the inbox name prefix (<prefix>:inbox:); what follows it in an
--            inbox key is the process id
-- ARGV[i+4] -> message i (its JSON envelope), for i = 1 .. n
-- Each entry gets the fields t (the term, ARGV[2]) and m (the envelope).
-- Returns: an array with, for each message in order, the id of its new
--          entry; the integer 0 when its inbox was full; the integer -3 when
--          its process is not live in the registry (nothing added for either).
--          Or the integer -1, and nothing is added, when the lock is not the
--          sender's under that term. An error when KEYS and ARGV do not pair
--          up (n, the number of messages, is #ARGV - 4; f = #KEYS - n must be
--          4 or 5, and KEYS[5] no inbox key when it is 5) or an inbox key does
--          not start with ARGV[4].
--
-- The cost of one call is what a producer pays per message, so the common
-- case (one message, as Router.Send makes) does only what safety needs,
-- with no table or closure of its own: the fence (two GETs), the registry
-- check (HEXISTS, plus ZSCORE with the deadlines key), XLEN when there is
-- a limit, and one XADD NOMKSTREAM. Only an inbox that does not exist yet
-- is added to the inbox set (SADD) and created: every inbox that exists is
-- in the set, as herd writes them (a Consumer creates its inbox and joins
-- the set in one transaction; an inbox leaves the set only when it is
-- deleted). A call is refused by the ACL without writing anything: when it
-- writes to one inbox, its first write is the XADD itself (NOMKSTREAM; a
-- refusal ends the script before anything was written), or on a new inbox
-- the SADD and XADD, checked before (refused in writes.lua); when it writes
-- to several, every write is checked before the first.
local n = #ARGV - 4
local first = #KEYS - n + 1
if n < 1 or (first ~= 5 and first ~= 6) then
  return redis.error_reply('ERR inbox_send: want 4 or 5 keys before one inbox key per message, got ' .. #KEYS .. ' keys and ' .. n .. ' messages')
end
local prefix = ARGV[4]
local expiry = nil
if first == 6 then
  -- An inbox key there is a call with a key too many or a message too few:
  -- refused, rather than each message added to the next message's inbox.
  expiry = KEYS[5]
  if string.sub(expiry, 1, #prefix) == prefix then
    return redis.error_reply('ERR inbox_send: key ' .. expiry .. ' in the place of the deadlines key is an inbox: got ' .. #KEYS .. ' keys and ' .. n .. ' messages')
  end
end
local stop = notInbox('inbox_send', prefix, first)
if stop then
  return stop
end
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] or redis.pcall('GET', KEYS[2]) ~= ARGV[2] then
  return -1
end
-- One message, as every Router.Send makes: its common case, an inbox that
-- exists, without the loop's caches (only a call that names an inbox twice
-- needs them) and its closures, as the script's cost is what a producer
-- pays per message. When the XADD is refused or the inbox does not exist
-- yet, it wrote nothing: the loop below, which checks and adds again, deals
-- with both.
if n == 1 then
  local k = KEYS[first]
  if not isLive(KEYS[3], expiry, string.sub(k, #prefix + 1)) then
    return {-3}
  end
  local cap = tonumber(ARGV[3]) or 0
  if cap > 0 and redis.call('XLEN', k) >= cap then
    return {0}
  end
  local e = redis.pcall('XADD', k, 'NOMKSTREAM', '*', 't', ARGV[2], 'm', ARGV[5])
  if type(e) == 'string' then
    return {e}
  end
end
local checked = false
for i = first + 1, #KEYS do
  if KEYS[i] ~= KEYS[first] then
    checked = true
    break
  end
end
if checked then
  local writes = {{'SADD', KEYS[4], 'x'}}
  for i = first, #KEYS do
    writes[#writes + 1] = {'XADD', KEYS[i], '*', 't', '0', 'm', 'x'}
  end
  stop = refused('inbox send', writes)
  if stop then
    return stop
  end
end
-- aclRefusal tells whether err is the ACL's refusal of a command, in the
-- words of Redis 7.0 ("can't run this command"), Redis 8 and Valkey ("ACL
-- failure") or outside scripts (NOPERM).
local function aclRefusal(err)
  return string.find(err, 'NOPERM', 1, true) or string.find(err, "can't run this command", 1, true) or
    string.find(err, 'ACL failure', 1, true)
end
local term = ARGV[2]
local cap = tonumber(ARGV[3]) or 0
local live = {}
local len = {}
local ids = {}
for i = first, #KEYS do
  local k = KEYS[i]
  local msg = ARGV[i - first + 5]
  local id = string.sub(k, #prefix + 1)
  if live[id] == nil then
    live[id] = isLive(KEYS[3], expiry, id)
  end
  if cap > 0 and live[id] and len[k] == nil then
    len[k] = redis.call('XLEN', k)
  end
  if not live[id] then
    ids[#ids + 1] = -3
  elseif cap > 0 and len[k] >= cap then
    ids[#ids + 1] = 0
  else
    local e = redis.pcall('XADD', k, 'NOMKSTREAM', '*', 't', term, 'm', msg)
    if type(e) == 'table' then
      -- Refused (or the key holds another type): nothing was written when
      -- the writes were not checked before, as this is the first.
      if not checked and aclRefusal(e.err) then
        return redis.error_reply('NOPERM this user has no permissions to run XADD ' .. k .. ' (herd inbox send script; nothing was written)')
      end
      return redis.error_reply(e.err)
    end
    if not e then
      -- No inbox yet: it joins the set as it is created.
      if not checked then
        stop = refused('inbox send', {{'SADD', KEYS[4], 'x'}, {'XADD', k, '*', 't', '0', 'm', 'x'}})
        if stop then
          return stop
        end
      end
      redis.call('SADD', KEYS[4], id)
      e = redis.call('XADD', k, '*', 't', term, 'm', msg)
    end
    ids[#ids + 1] = e
    if cap > 0 then
      len[k] = len[k] + 1
    end
  end
end
return ids
