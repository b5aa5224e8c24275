-- inbox_adopt: the new master takes over what its predecessors stored in the
-- durable inboxes and no slave handled, but only while it holds the master
-- lock under its term: the fence of route.lua, in the same atomic step.
--
-- Every write to an inbox is fenced by the term current at the time, and
-- terms only grow, so in each inbox the entries of older terms come first.
-- For each inbox given, the script walks its head: each entry written under
-- an older term is, with mode "adopt", added again at the inbox's end under
-- the caller's term (envelope unchanged, d = its deliveries so far: the old
-- d plus its delivery count in the group), or, with mode "drop", only
-- removed; either way the old entry is acknowledged and deleted. The walk
-- stops at the first entry of the caller's term or a later one. An entry
-- with no m field (not written by herd) is deleted and counted apart.
--
-- It also tells whether each inbox's process is live in the registry (an
-- entry whose deadline, when it has one, has not passed), so the caller can
-- move the inboxes of processes that are gone; an inbox that no longer
-- exists leaves the set of inboxes, and so does the inbox of a process that
-- is not live once it is empty (it is deleted, consumer group and all).
--
-- KEYS[1] -> <prefix>:master            (string: bare node id of the master)
-- KEYS[2] -> <prefix>:term              (string: last minted term)
-- KEYS[3] -> <prefix>:processes         (hash: process id -> ProcessInfo JSON)
-- KEYS[4] -> <prefix>:processes:expiry  (sorted set: process id -> deadline
--                                        in ms; emulated registry only)
-- KEYS[5] -> <prefix>:inboxes           (set: process ids with an inbox)
-- KEYS[6..] -> the inboxes to walk (streams <prefix>:inbox:<id>)
-- ARGV[1] -> node id of the caller
-- ARGV[2] -> the caller's term, as a decimal string
-- ARGV[3] -> the inboxes' consumer group
-- ARGV[4] -> the inbox name prefix (<prefix>:inbox:); what follows it in an
--            inbox key is the process id
-- ARGV[5] -> the most entries this call adopts or drops, over all inboxes
-- ARGV[6] -> "adopt" or "drop"
-- ARGV[7] -> "1" to look up a process's deadline in KEYS[4] (the emulated
--            registry), "0" when the caller's registry has Redis expire its
--            entries (KEYS[4] is then not read), as inbox_send.lua decides
-- Returns: the integer -1, and nothing is changed, when the lock is not the
--          caller's under that term; otherwise an array of four integers per
--          inbox, in order: state (0: the inbox is gone; 1: no entry of an
--          older term is left; 2: the budget ran out before its walk ended),
--          live (1 when its process is live), the entries adopted or
--          dropped, and the entries without m deleted.
--          An error when ARGV[6] is no mode, ARGV[7] neither "0" nor "1", or
--          an inbox key does not start with ARGV[4].
local prefix, mode = ARGV[4], ARGV[6]
if mode ~= 'adopt' and mode ~= 'drop' then
  return redis.error_reply('ERR inbox_adopt: mode ' .. tostring(mode) .. ' is neither adopt nor drop')
end
if ARGV[7] ~= '0' and ARGV[7] ~= '1' then
  return redis.error_reply('ERR inbox_adopt: deadlines ' .. tostring(ARGV[7]) .. ' is neither 0 nor 1')
end
-- The inbox keys checked, then the fence, then every write checked against
-- the user's ACL before the first one (writes.lua).
local stop = notInbox('inbox_adopt', prefix, 6) or fencedWrites('inbox adopt', {{'SREM', KEYS[5], 'x'}}, 6, function(k)
  return {{'XACK', k, ARGV[3], '0-1'}, {'XDEL', k, '0-1'}, {'DEL', k}}
end)
if stop then
  return stop
end
local term = tonumber(ARGV[2])
local budget = tonumber(ARGV[5]) or 0
local expiry = nil
if ARGV[7] == '1' then
  expiry = KEYS[4]
end
local out = {}
for i = 6, #KEYS do
  local k = KEYS[i]
  local id = string.sub(k, #prefix + 1)
  local live = 0
  if isLive(KEYS[3], expiry, id) then
    live = 1
  end
  local state, n, bad = 1, 0, 0
  if redis.call('EXISTS', k) == 0 then
    redis.call('SREM', KEYS[5], id)
    state = 0
  else
    -- The first read looks at the head alone: in the steady state it is
    -- already of the caller's term, and the walk ends there.
    local count = 1
    while state == 1 do
      if budget <= 0 then
        state = 2
        break
      end
      local es = redis.call('XRANGE', k, '-', '+', 'COUNT', math.min(budget, count))
      count = 64
      if #es == 0 then
        break
      end
      for _, e in ipairs(es) do
        local f = e[2]
        local m, d, et = nil, 0, 0
        for j = 1, #f, 2 do
          if f[j] == 'm' then
            m = f[j + 1]
          elseif f[j] == 'd' then
            d = tonumber(f[j + 1]) or 0
          elseif f[j] == 't' then
            et = tonumber(f[j + 1]) or 0
          end
        end
        if m ~= nil and et >= term then
          state = 3 -- the walk reached the caller's term
          break
        end
        if m == nil then
          bad = bad + 1
        else
          if mode == 'adopt' then
            local p = redis.pcall('XPENDING', k, ARGV[3], e[1], e[1], 1)
            if type(p) == 'table' and #p == 1 then
              d = d + p[1][4]
            end
            redis.call('XADD', k, '*', 't', ARGV[2], 'd', tostring(d), 'm', m)
          end
          n = n + 1
          budget = budget - 1
        end
        redis.pcall('XACK', k, ARGV[3], e[1])
        redis.call('XDEL', k, e[1])
        if budget <= 0 then
          break
        end
      end
    end
    if state == 3 then
      state = 1
    end
    if state == 1 and live == 0 and redis.call('XLEN', k) == 0 then
      redis.call('DEL', k)
      redis.call('SREM', KEYS[5], id)
      state = 0
    end
  end
  out[#out + 1] = state
  out[#out + 1] = live
  out[#out + 1] = n
  out[#out + 1] = bad
end
return out
