-- acquire: make the caller the master of one election if nobody holds the lock,
-- minting a fencing term that is greater than every term minted before on
-- this lock name (also after a restart that lost all data), and announcing it.
--
-- KEYS[1] -> <prefix>:master          (string: bare node id of the master; TTL = lock TTL)
-- KEYS[2] -> <prefix>:heartbeat       (string: server time of the last acquire/renew, ms since the epoch)
-- KEYS[3] -> <prefix>:master_process  (string: the master's ProcessInfo JSON; TTL = lock TTL)
-- KEYS[4] -> <prefix>:term            (string: last minted term, decimal integer; no TTL)
-- KEYS[5] -> <prefix>:successor       (string: node id a Transfer reserved the free lock for)
-- ARGV[1] -> node id of the candidate
-- ARGV[2] -> lock TTL (milliseconds)
-- ARGV[3] -> the candidate's ProcessInfo as a JSON object without a "term" member,
--            or "" to leave KEYS[3] alone; the script appends "term"
-- ARGV[4] -> events channel (<prefix>:events)
-- ARGV[5] -> the highest term the caller has seen on this lock name, or 0 (or
--            "") when it has seen none or has waited out a data loss
-- Returns: {term} when the caller became master;
--          {0, holder, pttl, term} when the lock is held: holder is the holder's
--          node id ("" when the key holds something that is not a string), pttl
--          its remaining time to live in milliseconds (-1: the key has no TTL),
--          term the last minted term (0 when none or unreadable);
--          {-2, successor, pttl, term} when the lock is free but reserved for
--          another node by a Transfer, for pttl more milliseconds;
--          {-3, what} or {-3, what, why} when the lock is free but the term key
--          holds something herd never writes (what: the value, or "a <type>";
--          why: what is wrong with a decimal value): someone else's data, or
--          damage. A term above 2^53 - 1 is such garbage (a Lua number holds
--          no larger integer exactly), and so is 2^53 - 1 itself, after which
--          no term can be minted exactly. Nothing is written until an
--          operator deletes it;
--          {-1, term} when the lock is free but the term key is missing, holds
--          garbage, or holds a term below ARGV[5]: Redis lost data that the
--          caller saw, and a master elected before the loss may still be
--          acting. Nothing is written; term is the key's term (0 when none).
--
-- The term is max(previous + 1, server TIME in ms): previous + 1 keeps terms
-- increasing while the term key lives; TIME keeps them increasing when the key
-- was lost with the data. The data-loss answer is what makes every path to
-- the lock wait for the masters of before a loss to fence themselves: the
-- caller decides when it has waited, not which path brought it here.
--
-- The notice is JSON built in a fixed member order: strings that come from
-- the caller or from Redis through cjson.encode, numbers as decimal text
-- (string.format('%d')). cjson.encode writes numbers above 10^14 in exponent
-- form with 14 digits (1.7726007670001e+15) and orders a table's members
-- differently on each server, so it never encodes a number or a whole notice.
local MAX = 9007199254740991 -- 2^53 - 1, the largest integer a Lua number holds exactly
local raw = redis.pcall('GET', KEYS[4])
local prev, garbage, why = 0, false, nil
if type(raw) == 'table' then
  garbage = 'a ' .. redis.call('TYPE', KEYS[4])['ok']
elseif raw then
  if not string.match(raw, '^%d+$') then
    garbage = string.sub(raw, 1, 64)
  elseif tonumber(raw) > MAX then
    garbage, why = string.sub(raw, 1, 64), 'above 2^53 - 1, the largest term herd can mint exactly'
  elseif tonumber(raw) == MAX then
    garbage, why = raw, 'no term above it can be minted exactly'
  else
    prev = tonumber(raw)
  end
end

local seen = tonumber(ARGV[5]) or 0
local successor = redis.pcall('GET', KEYS[5])
if type(successor) ~= 'string' then successor = false end
local other = successor and successor ~= ARGV[1]
if (garbage or prev < seen or other) and not redis.pcall('GET', KEYS[1]) then
  if garbage then return {-3, garbage, why} end
  if prev < seen then return {-1, prev} end
  return {-2, successor, redis.call('PTTL', KEYS[5]), prev}
end

-- Every write checked against the user's ACL before the first one (writes.lua).
local denied = refused('acquire', {{'SET', KEYS[1], 'x'}, {'SET', KEYS[4], 'x'}, {'DEL', KEYS[5]}, {'SET', KEYS[2], 'x'},
    {'SET', KEYS[3], 'x'}, {'PUBLISH', ARGV[4], 'x'}})
if denied then
  return denied
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local holder = redis.pcall('GET', KEYS[1])
  if type(holder) ~= 'string' then holder = '' end
  return {0, holder, redis.call('PTTL', KEYS[1]), prev}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local term = math.max(prev + 1, now)
local termStr = string.format('%d', term)

redis.call('SET', KEYS[4], termStr)
if successor then redis.call('DEL', KEYS[5]) end
redis.call('SET', KEYS[2], string.format('%d', now), 'PX', ARGV[2])
if ARGV[3] ~= '' then
  local info = string.sub(ARGV[3], 1, -2) .. ',"term":' .. termStr .. '}'
  redis.call('SET', KEYS[3], info, 'PX', ARGV[2])
end
redis.call('PUBLISH', ARGV[4], '{"event":"acquired","nodeId":' .. cjson.encode(ARGV[1]) .. ',"term":' .. termStr .. '}')
return {term}
