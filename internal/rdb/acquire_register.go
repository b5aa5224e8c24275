package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

// acquireRegisterSrc is acquire.lua and registry_put.lua in one script: a
// candidate's attempt at the lock and, when it takes the lock, its
// registration as master under the term just minted, in one call, so that a
// new master is registered in the round trip that made it master. Each file
// runs as a function of its own KEYS and ARGV, unchanged. The registration
// runs under pcall, after the lock is taken: an entry Redis refuses to write
// (another incarnation's, garbage in the registry's keys, an ACL) costs the
// registration, which the caller then sends alone, never the lock.
//
// KEYS[1..5] -> acquire.lua's KEYS (master, heartbeat, master_process, term,
//
//	successor); registry_put.lua's are KEYS[6], KEYS[7], KEYS[1],
//	KEYS[4] and KEYS[8] (processes, processes:expiry, master, term,
//	processes:version)
//
// ARGV[1..5] -> acquire.lua's ARGV
// ARGV[6..]  -> registry_put.lua's ARGV for a master write, with an entry
//
//	(its ARGV[3]) without a "term" member and any term as its ARGV[9]:
//	the script appends the minted term to the entry and fences the write
//	with it
//
// Returns: acquire.lua's reply when the lock was not taken (or the call
// refused); else {term, registry_put's reply}, the second being the error's
// text (a string) when the registration failed.
var acquireRegisterSrc = withWrites(acquireRegisterBody)

// acquireRegisterBody is acquireRegisterSrc without the writes.lua prelude,
// which it needs: Ask's script with an acquire (takeSrc) runs it as a
// function of its own KEYS and ARGV.
var acquireRegisterBody = `local function acquire(KEYS, ARGV)
` + acquireSrc + `
end
local function put(KEYS, ARGV)
` + registryPutSrc + `
end
local res = acquire({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]}, {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]})
if type(res) ~= 'table' or res.err or type(res[1]) ~= 'number' or res[1] <= 0 then
  return res
end
local term = string.format('%d', res[1])
local pargv = {}
for i = 6, #ARGV do
  pargv[#pargv + 1] = ARGV[i]
end
pargv[3] = string.sub(pargv[3], 1, -2) .. ',"term":' .. term .. '}'
pargv[9] = term
local ok, reg = pcall(put, {KEYS[6], KEYS[7], KEYS[1], KEYS[4], KEYS[8]}, pargv)
if not ok or (type(reg) == 'table' and reg.err) then
  local e = ok and reg.err or reg
  if type(e) == 'table' then e = e.err end
  reg = tostring(e)
end
return {res[1], reg}
`

var acquireRegisterScript = redis.NewScript(acquireRegisterSrc)

// AcquireRegisterSHA is the digest by which EVALSHA names the acquire with
// a registration (AcquireRegister).
var AcquireRegisterSHA = acquireRegisterScript.Hash()

// AcquireRegister is Acquire and, when it takes the lock, RegistryPut of p
// (a registration with role master; p.Value without a "term" member, and
// p.Term ignored: the script fences the write with the term it minted and
// appends that term to the entry) in one script call. err is the call's:
// when it is not nil, it is unknown whether either ran. When the lock was
// not taken, a is Acquire's answer and nothing was registered. When it
// was, stored and regErr are the registration's outcome, regErr being its
// own error (the lock is taken all the same).
func AcquireRegister(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, ttl time.Duration, info []byte, seen int64, p Put) (a Acquired, stored Stored, regErr, err error) {
	keys, args, err := acquireRegisterCall(k, nodeID, ttl, info, seen, p)
	if err != nil {
		return Acquired{}, Stored{}, nil, err
	}
	reply, err := run(ctx, c, acquireRegisterScript, "acquire register", keys, args...)
	if err != nil {
		return Acquired{}, Stored{}, nil, err
	}
	return parseAcquireRegister(k, reply)
}

// acquireRegisterCall is the KEYS and ARGV of acquireRegisterSrc.
func acquireRegisterCall(k keyspace.Keys, nodeID string, ttl time.Duration, info []byte, seen int64, p Put) (keys []string, args []any, err error) {
	if len(info) > 0 && !isObject(info) {
		return nil, nil, fmt.Errorf("acquire: process info is not a JSON object")
	}
	p.Role, p.Heartbeat, p.Term = "master", false, 0
	pkeys, pargs, err := putCall(k, p)
	if err != nil {
		return nil, nil, err
	}
	return append(acquireKeys(k), pkeys[0], pkeys[1], pkeys[4]), append(acquireArgs(k, nodeID, ttl, info, seen), pargs...), nil
}

// parseAcquireRegister reads the reply of acquireRegisterSrc on the keys
// k, as AcquireRegister returns it.
func parseAcquireRegister(k keyspace.Keys, reply any) (a Acquired, stored Stored, regErr, err error) {
	if arr, ok := reply.([]any); ok && len(arr) == 2 {
		if term, ok := arr[0].(int64); ok && term > 0 {
			stored, regErr = parseBeat(arr[1])
			return Acquired{Term: term}, stored, regErr, nil
		}
	}
	a, err = parseAcquired(k, reply)
	return a, Stored{}, nil, err
}
