package rdb

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

// checkBeatSrc is check.lua and registry_put.lua in one script: a slave's
// look at the lock and its registry heartbeat in one call, so that a slave
// at rest costs Redis one script call per CheckInterval instead of two.
// Each file runs as a function of its own KEYS and ARGV, unchanged; the
// heartbeat runs under pcall, so that an entry Redis refuses to write
// (garbage in the registry's keys, an ACL) costs the heartbeat, never the
// check.
//
// KEYS[1..3] -> check.lua's KEYS
// KEYS[4..8] -> registry_put.lua's KEYS
// ARGV       -> registry_put.lua's ARGV
// Returns: {check's reply, registry_put's reply}, the second being the
//
//	error's text (a string) when the heartbeat failed.
var checkBeatSrc = withWrites(`local function check(KEYS, ARGV)
` + checkSrc + `
end
local function put(KEYS, ARGV)
` + registryPutSrc + `
end
local state = check({KEYS[1], KEYS[2], KEYS[3]}, {})
local ok, res = pcall(put, {KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]}, ARGV)
if not ok or (type(res) == 'table' and res.err) then
  local e = ok and res.err or res
  if type(e) == 'table' then e = e.err end
  res = tostring(e)
end
return {state, res}
`)

var checkBeatScript = redis.NewScript(checkBeatSrc)

// CheckBeatSHA is the digest by which EVALSHA names the check with a
// heartbeat (CheckBeat).
var CheckBeatSHA = checkBeatScript.Hash()

// CheckBeat is Check and RegistryPut of p (a heartbeat) in one script call.
// err is the call's: when it is not nil, neither ran, or it is unknown
// whether they did. beatErr is the heartbeat's own, the check being
// answered.
func CheckBeat(ctx context.Context, c redis.Scripter, k keyspace.Keys, p Put) (st MasterState, stored Stored, beatErr, err error) {
	pkeys, args, err := putCall(k, p)
	if err != nil {
		return MasterState{}, Stored{}, nil, err
	}
	keys := append([]string{k.Master, k.Term, k.Next}, pkeys...)
	reply, err := run(ctx, c, checkBeatScript, "check beat", keys, args...)
	if err != nil {
		return MasterState{}, Stored{}, nil, err
	}
	arr, ok := array(reply, 2)
	if !ok {
		return MasterState{}, Stored{}, nil, unexpected("check beat", reply)
	}
	if st, err = parseCheck(k, arr[0]); err != nil {
		return MasterState{}, Stored{}, nil, err
	}
	stored, beatErr = parseBeat(arr[1])
	return st, stored, beatErr, nil
}

// parseBeat reads the heartbeat's part of the reply of checkBeatSrc:
// registry_put.lua's reply, or the text of its error.
func parseBeat(reply any) (Stored, error) {
	if msg, ok := reply.(string); ok {
		return Stored{}, fmt.Errorf("registry put script: %s%s", msg, aclHint("registry put", fmt.Errorf("%s", msg)))
	}
	return parsePut(reply)
}
