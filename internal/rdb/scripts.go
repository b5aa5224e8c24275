package rdb

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

var (
	// writesSrc is writes.lua, the prelude of every script that writes: it
	// defines refused, the check of the script's writes against the
	// user's ACL before the first one, and the inbox scripts' checks
	// fencedWrites (the fence and refused before their first write),
	// notInbox (a key is an inbox key) and isLive (a process is live in
	// the registry).
	//go:embed writes.lua
	writesSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed check.lua
	checkSrc string
	//go:embed route.lua
	routeSrc string
	//go:embed route_batch.lua
	routeBatchSrc string
)

// withWrites returns src after the prelude writes.lua: the source of a
// script that writes, as Redis runs it (also when sent with EVAL).
func withWrites(src string) string { return writesSrc + src }

// The lock scripts. Their contracts (KEYS, ARGV, reply) are in the headers of
// the .lua files; the typed functions of this package (Acquire, Renew,
// ReleaseTo, Check, Route, RouteBatch) are the only callers in herd.
var (
	// acquireScript is acquire.lua: SET master NX PX, mint the term, store the
	// heartbeat and master_process, publish an "acquired" notice.
	acquireScript = redis.NewScript(withWrites(acquireSrc))
	// renewScript is renew.lua: extend the lock, heartbeat and master_process
	// while the lock is the caller's.
	renewScript = redis.NewScript(renewSrc)
	// releaseScript is release.lua: delete the lock keys if the lock is the
	// caller's and publish a "released" notice.
	releaseScript = redis.NewScript(withWrites(releaseSrc))
	// checkScript is check.lua: the master's node id, term and remaining TTL.
	checkScript = redis.NewScript(checkSrc)
	// routeScript is route.lua: PUBLISH a message to channels only while the
	// sender holds the lock under its term.
	routeScript = redis.NewScript(routeSrc)
	// routeBatchScript is route_batch.lua: PUBLISH many messages, each to its
	// own channel, after one check that the sender holds the lock under its
	// term.
	routeBatchScript = redis.NewScript(routeBatchSrc)
)

// The SHA1 digests by which EVALSHA names the scripts, for hooks that
// recognise a script's calls on the wire (fault injection in tests, command
// counts); the scripts themselves are run only through the typed functions.
var (
	AcquireSHA        = acquireScript.Hash()
	RenewSHA          = renewScript.Hash()
	ReleaseSHA        = releaseScript.Hash()
	CheckSHA          = checkScript.Hash()
	RouteSHA          = routeScript.Hash()
	RouteBatchSHA     = routeBatchScript.Hash()
	RegistryProbeSHA  = registryProbeScript.Hash()
	RegistryPutSHA    = registryPutScript.Hash()
	RegistryRemoveSHA = registryRemoveScript.Hash()
	RegistryExpireSHA = registryExpireScript.Hash()
)

// Load puts every script of herd into the script cache of the server c
// reaches, so that no later call pays the NOSCRIPT round
// trip (the typed functions send EVALSHA and fall back to EVAL once). It is
// never needed for correctness; under Cluster it loads on the node c picks.
func Load(ctx context.Context, c redis.Scripter) error {
	for _, s := range []*redis.Script{acquireScript, renewScript, releaseScript, checkScript, routeScript,
		routeBatchScript, registryProbeScript, registryPutScript, registryRemoveScript, registryExpireScript,
		inboxSendScript, inboxMoveScript, inboxAdoptScript, inboxDeadScript, deadRetryScript, nextScript, checkBeatScript, handBackScript,
		acquireRegisterScript, takeScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("rdb: load: %w", err)
		}
	}
	return nil
}

// Acquired is the outcome of Acquire.
type Acquired struct {
	// Term is the fencing term of the new mastership; 0 when the lock is held.
	Term int64
	// Holder is the node id of the current holder when Term is 0. It is ""
	// when the lock key holds something that is not a string.
	Holder string
	// TTL is the holder's remaining lock time when Term is 0; negative when the
	// lock key has no expiry.
	TTL time.Duration
	// HolderTerm is the last minted term when Term is 0: the holder's term
	// when it was elected by herd; 0 when unknown.
	HolderTerm int64
	// Garbage names what is wrong with the held lock when its key holds a
	// value herd never writes; "" when all is well.
	Garbage string
	// TermGarbage is true when the term key holds something herd never
	// writes (Garbage says what): nothing was written, and nothing will be
	// until an operator deletes the key (herd then takes it for a data loss).
	TermGarbage bool
	// Reserved is true when the lock was free but a Transfer reserved it
	// for another node: Holder is that node and TTL the reservation's rest.
	Reserved bool
	// DataLoss is true when the lock was free but the term key was missing,
	// unreadable or below the caller's seen term: Redis lost data the caller
	// had seen. Nothing was written; HolderTerm is the key's term (0 when
	// none). The caller waits until every master elected before the loss has
	// fenced itself, then acquires with seen 0.
	DataLoss bool
}

// Acquire runs acquire.lua for nodeID. info is the candidate's ProcessInfo
// JSON object without a "term" member (the script adds it), or nil. seen is
// the highest term the caller has seen on the lock name, or 0 when it has
// seen none or has waited out a data loss: when the lock is free and the
// term key is missing or below seen, nothing is written and the result has
// DataLoss set.
func Acquire(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, ttl time.Duration, info []byte, seen int64) (Acquired, error) {
	if len(info) > 0 && (info[0] != '{' || info[len(info)-1] != '}') {
		return Acquired{}, fmt.Errorf("acquire: process info is not a JSON object")
	}
	reply, err := run(ctx, c, acquireScript, "acquire", acquireKeys(k), acquireArgs(k, nodeID, ttl, info, seen)...)
	if err != nil {
		return Acquired{}, err
	}
	return parseAcquired(k, reply)
}

// acquireKeys are the KEYS of acquire.lua, and the first ones of
// renew.lua and release.lua.
func acquireKeys(k keyspace.Keys) []string {
	return []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Successor}
}

// acquireArgs are the ARGV of acquire.lua.
func acquireArgs(k keyspace.Keys, nodeID string, ttl time.Duration, info []byte, seen int64) []any {
	return []any{nodeID, ttl.Milliseconds(), info, k.Events, termArg(seen)}
}

// parseAcquired reads the reply of acquire.lua on the keys k: one of the
// shapes its header lists, told apart by the first element, the code.
func parseAcquired(k keyspace.Keys, reply any) (Acquired, error) {
	arr, _ := reply.([]any)
	if len(arr) == 0 {
		return Acquired{}, unexpected("acquire", reply)
	}
	code, ok := arr[0].(int64)
	if !ok {
		return Acquired{}, unexpected("acquire", reply)
	}
	a, ok := acquiredRest(k, code, arr[1:])
	if !ok {
		return Acquired{}, unexpected("acquire", reply)
	}
	return a, nil
}

// acquiredRest reads what follows code in acquire.lua's reply: nothing
// after a new term ({term}), or the rest of a reply that says why none was
// minted. ok is false for a rest that does not fit code.
func acquiredRest(k keyspace.Keys, code int64, rest []any) (Acquired, bool) {
	switch {
	case code > 0:
		return Acquired{Term: code}, len(rest) == 0
	case code == -1:
		return acquiredDataLoss(rest)
	case code == -3:
		return acquiredTermGarbage(k, rest)
	}
	return acquiredHeld(k, code, rest)
}

// acquiredTermGarbage reads the rest of a {-3, what} or {-3, what, why}
// reply: the lock is free but the term key holds garbage.
func acquiredTermGarbage(k keyspace.Keys, rest []any) (Acquired, bool) {
	f := fields{arr: rest, ok: len(rest) == 1 || len(rest) == 2}
	what := f.strAt(0)
	if !strings.HasPrefix(what, "a ") {
		what = strconv.Quote(what)
	}
	if len(rest) == 2 {
		what += " (" + f.strAt(1) + ")"
	}
	return Acquired{TermGarbage: true, TTL: -1, Garbage: fmt.Sprintf(
		"key %q holds %s, not a term: herd writes nothing to this lock until an operator who knows it is no other program's data deletes it (DEL %s)",
		k.Term, what, k.Term)}, f.ok
}

// acquiredDataLoss reads the rest of a {-1, term} reply: the lock is free
// but Redis lost data the caller had seen.
func acquiredDataLoss(rest []any) (Acquired, bool) {
	f := fieldsOf(rest, 1)
	return Acquired{DataLoss: true, HolderTerm: f.countAt(0), TTL: -1}, f.ok
}

// acquiredHeld reads the rest of a {0, holder, pttl, term} reply (the lock
// is held) or of a {-2, successor, pttl, term} one (the free lock is
// reserved for successor, never "").
func acquiredHeld(k keyspace.Keys, code int64, rest []any) (Acquired, bool) {
	f := fieldsOf(rest, 3)
	holder, pttl, holderTerm := f.strAt(0), f.intAt(1), f.intAt(2)
	if !f.ok {
		return Acquired{}, false
	}
	a := Acquired{Holder: holder, TTL: pttlDuration(pttl), HolderTerm: holderTerm}
	switch code {
	case -2:
		a.Reserved = true
		return a, holder != ""
	case 0:
		a.Garbage = lockGarbage(k, holder, pttl)
		return a, true
	}
	return Acquired{}, false
}

// SplitMasterProcess is the inverse of what acquire.lua stores in
// <prefix>:master_process: the candidate's ProcessInfo object with a "term"
// member appended as its last member. It returns the object as the
// candidate sent it and the term; ok is false for a value of any other form.
// This and acquire.lua are the one place that layout is known.
func SplitMasterProcess(raw []byte) (info []byte, term int64, ok bool) {
	const member = `,"term":`
	i := bytes.LastIndex(raw, []byte(member))
	if i < 0 || raw[len(raw)-1] != '}' { // i >= 0: raw holds member
		return nil, 0, false
	}
	digits := raw[i+len(member) : len(raw)-1]
	term, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil || term <= 0 || digits[0] == '+' {
		return nil, 0, false
	}
	info = make([]byte, 0, i+1)
	return append(append(info, raw[:i]...), '}'), term, true
}

// Renew runs renew.lua. term 0 skips the term check. It reports whether the
// lock was still the caller's and has been extended.
func Renew(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, ttl time.Duration) (bool, error) {
	reply, err := run(ctx, c, renewScript, "renew", acquireKeys(k), nodeID, ttl.Milliseconds(), termArg(term))
	if err != nil {
		return false, err
	}
	return oneOrZero("renew", reply)
}

// Release runs release.lua. term 0 skips the term check. It reports whether
// the lock was the caller's and has been released.
func Release(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64) (bool, error) {
	return ReleaseTo(ctx, c, k, nodeID, term, "", 0)
}

// ReleaseTo is Release that also reserves the free lock for successor, for
// window: until then only successor can acquire it (the others' acquire
// answers Reserved). The release notice names it ("to"). An empty successor
// reserves nothing.
func ReleaseTo(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, successor string, window time.Duration) (bool, error) {
	reply, err := run(ctx, c, releaseScript, "release", append(acquireKeys(k), k.Next),
		nodeID, termArg(term), k.Events, successor, max(window.Milliseconds(), 1))
	if err != nil {
		return false, err
	}
	return oneOrZero("release", reply)
}

// lockGarbage describes what is wrong with a held lock, or returns "".
func lockGarbage(k keyspace.Keys, holder string, pttl int64) string {
	switch {
	case holder == "":
		return fmt.Sprintf("key %q does not hold a node id", k.Master)
	case pttl < 0:
		return fmt.Sprintf("key %q has no expiry, so its holder would be master forever", k.Master)
	}
	return ""
}
