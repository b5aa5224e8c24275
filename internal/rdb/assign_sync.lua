-- assign_sync: one slave's round trip for all its items: give up the items
-- it released, then claim or renew every item the plan gives it, and list
-- the items it still owns that the plan no longer gives it.
--
-- Ownership is per item: the hash KEYS[1] maps an item to "<deadline> <slave
-- id> <incarnation>", the deadline in ms on the server's clock, the
-- incarnation naming the run of the process (two processes under one id
-- differ in it; a value without one is from before incarnations). A slave
-- claims an item the plan gives it only when no one owns it, or its owner's
-- deadline has passed: an item's new owner starts only after the old one
-- released it or could not renew it in time (the old owner's own deadline,
-- on its clock, ends its work a margin before this one). Another
-- incarnation of the same id is another owner: a process restarted under
-- its id, or a twin, waits for the deadline too.
--
-- KEYS[1] -> <prefix>:assign:<set>:own        (hash: item -> "<deadline ms> <slave id> <incarnation>")
-- KEYS[2] -> <prefix>:assign:<set>:plan:<id>  (set: the items planned for this slave)
-- KEYS[3] -> <prefix>:assign:<set>:held:<id>  (set: the items this slave may own)
-- KEYS[4] -> <prefix>:assign:<set>:plan       (hash: item -> slave id), read
--            to tell each released item's planned owner
-- An item this slave gives up is announced to the slave the plan gives it by
-- a PUBLISH of "free" on the channel named as that slave's plan set
-- (KEYS[2] with the other slave's id), best effort: it claims at once.
-- ARGV[1] -> this slave's id
-- ARGV[2] -> the ownership TTL (ms)
-- ARGV[3] -> "claim" (claim and renew) or "leave" (give up everything held)
-- ARGV[4] -> this slave's incarnation (no white space; not empty)
-- ARGV[5..] -> items this slave released: their work has ended
-- Returns: {owned, revoked, waiting, now}: owned lists the items this slave
--          owns until now + TTL (claimed or renewed by this call), revoked
--          those it owns that the plan no longer gives it (not renewed: they
--          expire at their deadline unless released), waiting those the plan
--          gives it that another slave still owns; now is the server's time
--          in ms.
local me, ttl, mode, inc = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
if not ttl or ttl <= 0 or (mode ~= 'claim' and mode ~= 'leave') or not inc or not string.match(inc, '^%S+$') then
  return redis.error_reply('ERR assign_sync: want a positive TTL, mode claim or leave and an incarnation, got ' ..
    tostring(ARGV[2]) .. ', ' .. tostring(mode) .. ' and ' .. tostring(inc))
end
local denied = refused('assign sync', {{'HSET', KEYS[1], 'i', 'x'}, {'HDEL', KEYS[1], 'i'},
  {'SADD', KEYS[3], 'x'}, {'SREM', KEYS[3], 'x'}})
if denied then
  return denied
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- owner returns the owner of item and its deadline, or nil when no one owns
-- it. The owner is me when it is this slave's id and incarnation, and
-- another string otherwise (another slave, or another incarnation of this
-- one).
local function owner(item)
  local v = redis.call('HGET', KEYS[1], item)
  if not v then
    return nil, 0
  end
  local d, id, i = string.match(v, '^(%d+) (%S+) (%S+)$')
  if not d then
    d, id = string.match(v, '^(%d+) (%S+)$')
    i = ''
  end
  if not d then
    return nil, 0 -- not written by herd: no one's
  end
  if id == me and i ~= inc then
    id = id .. ' ' .. i -- the same id, another run: another owner
  end
  return id, tonumber(d)
end
if string.sub(KEYS[2], -#me - 1) ~= ':' .. me then
  return redis.error_reply('ERR assign_sync: the plan set ' .. KEYS[2] .. ' is not slave ' .. me .. "'s")
end
local planPrefix = string.sub(KEYS[2], 1, #KEYS[2] - #me)
local told = {} -- one notice per new owner, however many items it gets
local function release(item)
  if owner(item) == me then
    redis.call('HDEL', KEYS[1], item)
    local to = redis.pcall('HGET', KEYS[4], item) -- a hint: never fail after a write
    if type(to) == 'string' and to ~= me and not told[to] then
      told[to] = true
      redis.pcall('PUBLISH', planPrefix .. to, 'free') -- a hint: pcall
    end
  end
  redis.call('SREM', KEYS[3], item)
end

for i = 5, #ARGV do
  release(ARGV[i])
end
if mode == 'leave' then
  for _, item in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    release(item)
  end
  return {{}, {}, {}, now}
end

local owned, revoked, waiting = {}, {}, {}
local planned = {}
local value = tostring(now + ttl) .. ' ' .. me .. ' ' .. inc
for _, item in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  planned[item] = true
  local id, deadline = owner(item)
  if id == nil or id == me or deadline <= now then
    redis.call('HSET', KEYS[1], item, value)
    redis.call('SADD', KEYS[3], item)
    owned[#owned + 1] = item
  else
    waiting[#waiting + 1] = item
  end
end
for _, item in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if not planned[item] then
    local id, deadline = owner(item)
    if id == me and deadline > now then
      revoked[#revoked + 1] = item
    else
      redis.call('SREM', KEYS[3], item) -- lost already: expired or taken
    end
  end
end
return {owned, revoked, waiting, now}
