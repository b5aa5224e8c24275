package scripts

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxTerm is the largest term and the largest registry version herd mints
// or accepts: 2^53 - 1, the largest integer a Lua number (a double) holds
// exactly, and JavaScript's Number.MAX_SAFE_INTEGER. acquire.lua refuses a
// term key above it as garbage (writing nothing, naming the DEL to run), and
// at it, since no term can follow it exactly; the registry scripts count a
// version counter at or above it as none and mint from the server's clock.
const MaxTerm = 1<<53 - 1

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
// the .lua files; the typed functions below are the only callers in herd.
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
		inboxSendScript, inboxMoveScript, inboxAdoptScript, inboxDeadScript, deadRetryScript, nextScript, checkBeatScript, handBackScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("scripts: load: %w", err)
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
func Acquire(ctx context.Context, c redis.Scripter, k Keys, nodeID string, ttl time.Duration, info []byte, seen int64) (Acquired, error) {
	if len(info) > 0 && (info[0] != '{' || info[len(info)-1] != '}') {
		return Acquired{}, fmt.Errorf("acquire: process info is not a JSON object")
	}
	reply, err := run(ctx, c, acquireScript, "acquire", acquireKeys(k), acquireArgs(k, nodeID, ttl, info, seen)...)
	if err != nil {
		return Acquired{}, err
	}
	return parseAcquired(k, reply)
}

func acquireKeys(k Keys) []string {
	return []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Successor}
}

func acquireArgs(k Keys, nodeID string, ttl time.Duration, info []byte, seen int64) []any {
	return []any{nodeID, ttl.Milliseconds(), info, k.Events, termArg(seen)}
}

func parseAcquired(k Keys, reply any) (Acquired, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) < 1 || len(arr) > 4 {
		return Acquired{}, unexpected("acquire", reply)
	}
	term, ok := arr[0].(int64)
	if !ok {
		return Acquired{}, unexpected("acquire", reply)
	}
	if (len(arr) == 2 || len(arr) == 3) && term == -3 {
		what, ok := arr[1].(string)
		if !ok {
			return Acquired{}, unexpected("acquire", reply)
		}
		if !strings.HasPrefix(what, "a ") {
			what = strconv.Quote(what)
		}
		if len(arr) == 3 {
			why, ok := arr[2].(string)
			if !ok {
				return Acquired{}, unexpected("acquire", reply)
			}
			what += " (" + why + ")"
		}
		return Acquired{TermGarbage: true, TTL: -1, Garbage: fmt.Sprintf(
			"key %q holds %s, not a term: herd writes nothing to this lock until an operator who knows it is no other program's data deletes it (DEL %s)",
			k.Term, what, k.Term)}, nil
	}
	if len(arr) == 3 {
		return Acquired{}, unexpected("acquire", reply)
	}
	if len(arr) == 2 {
		prev, ok := arr[1].(int64)
		if term != -1 || !ok || prev < 0 {
			return Acquired{}, unexpected("acquire", reply)
		}
		return Acquired{DataLoss: true, HolderTerm: prev, TTL: -1}, nil
	}
	if len(arr) == 1 {
		if term <= 0 {
			return Acquired{}, unexpected("acquire", reply)
		}
		return Acquired{Term: term}, nil
	}
	holder, ok1 := arr[1].(string)
	pttl, ok2 := arr[2].(int64)
	holderTerm, ok3 := arr[3].(int64)
	if term == -2 && ok1 && ok2 && ok3 && holder != "" {
		return Acquired{Holder: holder, TTL: pttlDuration(pttl), HolderTerm: holderTerm, Reserved: true}, nil
	}
	if term != 0 || !ok1 || !ok2 || !ok3 {
		return Acquired{}, unexpected("acquire", reply)
	}
	return Acquired{Holder: holder, TTL: pttlDuration(pttl), HolderTerm: holderTerm, Garbage: lockGarbage(k, holder, pttl)}, nil
}

// SplitMasterProcess is the inverse of what acquire.lua stores in
// <prefix>:master_process: the candidate's ProcessInfo object with a "term"
// member appended as its last member. It returns the object as the
// candidate sent it and the term; ok is false for a value of any other form.
// This and acquire.lua are the one place that layout is known.
func SplitMasterProcess(raw []byte) (info []byte, term int64, ok bool) {
	const member = `,"term":`
	i := bytes.LastIndex(raw, []byte(member))
	if i < 0 || len(raw) < 2 || raw[len(raw)-1] != '}' {
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
func Renew(ctx context.Context, c redis.Scripter, k Keys, nodeID string, term int64, ttl time.Duration) (bool, error) {
	reply, err := run(ctx, c, renewScript, "renew", acquireKeys(k), nodeID, ttl.Milliseconds(), termArg(term))
	if err != nil {
		return false, err
	}
	return oneOrZero("renew", reply)
}

// Release runs release.lua. term 0 skips the term check. It reports whether
// the lock was the caller's and has been released.
func Release(ctx context.Context, c redis.Scripter, k Keys, nodeID string, term int64) (bool, error) {
	return ReleaseTo(ctx, c, k, nodeID, term, "", 0)
}

// ReleaseTo is Release that also reserves the free lock for successor, for
// window: until then only successor can acquire it (the others' acquire
// answers Reserved). The release notice names it ("to"). An empty successor
// reserves nothing.
func ReleaseTo(ctx context.Context, c redis.Scripter, k Keys, nodeID string, term int64, successor string, window time.Duration) (bool, error) {
	reply, err := run(ctx, c, releaseScript, "release", append(acquireKeys(k), k.Next),
		nodeID, termArg(term), k.Events, successor, max(window.Milliseconds(), 1))
	if err != nil {
		return false, err
	}
	return oneOrZero("release", reply)
}

// MasterState is the outcome of Check.
type MasterState struct {
	// Exists is false when no process holds the lock.
	Exists bool
	// NodeID is the master's node id; "" with Exists when the lock key holds
	// something that is not a string (see Garbage).
	NodeID string
	// Term is the last minted term, the current master's when it was elected
	// by herd; 0 when the term key is missing or unreadable.
	Term int64
	// TTL is the lock's remaining time; negative when the key has no expiry.
	TTL time.Duration
	// Garbage names what is wrong when a key holds a value herd never writes
	// (a non-string lock, a term that is not an integer, a lock without TTL);
	// "" when all is well.
	Garbage string
	// TermGarbage is true when the term key holds something that is not a
	// term (see Garbage).
	TermGarbage bool
	// TermMissing is true when the term key does not exist. The key has no
	// TTL and is never deleted, so once a term was minted on the lock name,
	// its absence means Redis lost its data (a restart without persistence, a
	// fail-over to a replica that had not received it, a FLUSHALL).
	TermMissing bool
	// Next is the succession the master of Term published (Keys.Next);
	// zero when there is none for Term (missing, of another term, or not a
	// succession).
	Next Succession
}

// Check runs check.lua.
func Check(ctx context.Context, c redis.Scripter, k Keys) (MasterState, error) {
	reply, err := run(ctx, c, checkScript, "check", []string{k.Master, k.Term, k.Next})
	if err != nil {
		return MasterState{}, err
	}
	return parseCheck(k, reply)
}

// CheckCall is the check script queued in a pipeline by QueueCheck; its
// Result is readable once the pipeline has run.
type CheckCall struct {
	k   Keys
	cmd *redis.Cmd
}

// QueueCheck queues check.lua in pipe, so that a caller can send the check
// together with commands of its own in one round trip (masterelection's
// Start does). It queues EVAL with the script's source, as
// QueueRegistryProbe does, so the round trip needs no NOSCRIPT fallback.
func QueueCheck(ctx context.Context, pipe redis.Pipeliner, k Keys) *CheckCall {
	return &CheckCall{k: k, cmd: pipe.Eval(ctx, checkSrc, []string{k.Master, k.Term, k.Next})}
}

// Result is what Check would have returned: the reply of the queued check,
// read after the pipeline ran, with its errors wrapped alike.
func (c *CheckCall) Result() (MasterState, error) {
	reply, err := c.cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return MasterState{}, unexpected("check", nil)
	case err != nil:
		return MasterState{}, fmt.Errorf("check script: %w%s", err, aclHint("check", err))
	}
	return parseCheck(c.k, reply)
}

// parseCheck reads the reply of check.lua on the keys k.
func parseCheck(k Keys, reply any) (MasterState, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) != 4 {
		return MasterState{}, unexpected("check", reply)
	}
	holder, ok1 := arr[0].(string)
	rawTerm, ok2 := arr[1].(string)
	pttl, ok3 := arr[2].(int64)
	rawNext, ok4 := arr[3].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return MasterState{}, unexpected("check", reply)
	}
	st := MasterState{TermMissing: rawTerm == ""}
	if pttl != -2 {
		st.Exists, st.NodeID, st.TTL, st.Garbage = true, holder, pttlDuration(pttl), lockGarbage(k, holder, pttl)
	}
	if rawTerm != "" {
		t, err := strconv.ParseInt(rawTerm, 10, 64)
		if err != nil || t < 0 || t > MaxTerm {
			st.TermGarbage = true
			shown := rawTerm
			if len(shown) > 64 { // garbage of any length: quote its start
				shown = shown[:64] + "…"
			}
			what := strconv.Quote(shown)
			if typ, ok := strings.CutPrefix(rawTerm, "!"); ok {
				what = "a " + typ
			} else if err == nil && t > MaxTerm || errors.Is(err, strconv.ErrRange) {
				what += " (above 2^53 - 1, the largest term herd can mint exactly)"
			}
			if st.Garbage == "" {
				st.Garbage = fmt.Sprintf("key %q holds %s, not a term", k.Term, what)
			}
		} else {
			st.Term = t
		}
	}
	if next, ok := parseSuccession(rawNext); ok && st.Term != 0 && next.Term == st.Term {
		st.Next = next
	}
	return st, nil
}

// Route runs route.lua: it publishes msg to every channel if nodeID still
// holds the lock under term, and returns the number of receivers of each
// channel, in order. It returns ErrFenced, and publishes nothing, otherwise.
func Route(ctx context.Context, c redis.Scripter, k Keys, nodeID string, term int64, msg []byte, channels ...string) ([]int64, error) {
	args := make([]any, 0, 3+len(channels))
	args = append(args, nodeID, termArg(term), msg)
	for _, ch := range channels {
		args = append(args, ch)
	}
	reply, err := run(ctx, c, routeScript, "route", []string{k.Master, k.Term}, args...)
	if err != nil {
		return nil, err
	}
	return routeCounts("route", reply, len(channels), func() string { return fmt.Sprintf("route as %q with term %d", nodeID, term) })
}

// routeCounts reads the reply of route.lua or route_batch.lua: n receiver
// counts, or -1 when the sender was fenced (an error wrapping ErrFenced,
// prefixed with what fenced returns: it is formatted only then, not on
// every message).
func routeCounts(name string, reply any, n int, fenced func() string) ([]int64, error) {
	if v, ok := reply.(int64); ok && v == -1 {
		return nil, fmt.Errorf("%s: %w", fenced(), ErrFenced)
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != n {
		return nil, unexpected(name, reply)
	}
	counts := make([]int64, len(arr))
	for i, v := range arr {
		if counts[i], ok = v.(int64); !ok || counts[i] < 0 {
			return nil, unexpected(name, reply)
		}
	}
	return counts, nil
}

// Routed is one message of RouteBatch: the bytes to publish and the channel
// to publish them to.
type Routed struct {
	// Channel is the channel to PUBLISH to (worker:slave:<id>).
	Channel string
	// Message is what to publish: the JSON envelope.
	Message []byte
}

// RouteBatch runs route_batch.lua: if nodeID still holds the lock under
// term, it publishes every message to its channel, in order, in one atomic
// step, and returns the number of receivers of each message, in order. It
// returns ErrFenced, and publishes nothing, otherwise. An empty msgs makes no
// call and returns nil counts and a nil error.
//
// The whole batch travels in one command: callers bound its size (pubsub
// splits batches into calls of at most pubsub.MaxBatchChunk messages).
func RouteBatch(ctx context.Context, c redis.Scripter, k Keys, nodeID string, term int64, msgs []Routed) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2+2*len(msgs))
	args = append(args, nodeID, termArg(term))
	for _, m := range msgs {
		args = append(args, m.Channel, m.Message)
	}
	reply, err := run(ctx, c, routeBatchScript, "route batch", []string{k.Master, k.Term}, args...)
	if err != nil {
		return nil, err
	}
	return routeCounts("route batch", reply, len(msgs), func() string {
		return fmt.Sprintf("route batch of %d messages as %q with term %d", len(msgs), nodeID, term)
	})
}

// lockGarbage describes what is wrong with a held lock, or returns "".
func lockGarbage(k Keys, holder string, pttl int64) string {
	switch {
	case holder == "":
		return fmt.Sprintf("key %q does not hold a node id", k.Master)
	case pttl < 0:
		return fmt.Sprintf("key %q has no expiry, so its holder would be master forever", k.Master)
	}
	return ""
}

// run is the one place that calls a script: EVALSHA with EVAL fallback, and
// errors wrapped with the script's name. redis.Nil never leaves it.
func run(ctx context.Context, c redis.Scripter, s *redis.Script, name string, keys []string, args ...any) (any, error) {
	reply, err := s.Run(ctx, c, keys, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, unexpected(name, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%s script: %w%s", name, err, aclHint(name, err))
	}
	return reply, nil
}

// scriptCommands are the commands each script runs, for ACL errors: Redis
// 7.0 does not name the command a script was refused.
var scriptCommands = map[string]string{
	"acquire":         "GET, SET, PTTL, TIME, PUBLISH",
	"renew":           "GET, TIME, PEXPIRE, SET",
	"release":         "GET, DEL, SET, PUBLISH",
	"check":           "GET, PTTL",
	"check beat":      "GET, PTTL, and those of registry put",
	"route":           "GET, PUBLISH",
	"next":            "GET, SET",
	"hand back":       "GET, SET, PTTL",
	"route batch":     "GET, PUBLISH",
	"inbox send":      "GET, HEXISTS, ZSCORE, TIME, SADD, XLEN, XADD",
	"assign plan":     "GET, HGET, HSET, HDEL, SADD, SREM",
	"assign sync":     "TIME, HGET, HSET, HDEL, SMEMBERS, SADD, SREM",
	"inbox move":      "GET, XRANGE, XPENDING, XADD, SADD, XACK, XDEL, XLEN, DEL, SREM",
	"inbox adopt":     "GET, TIME, HEXISTS, ZSCORE, EXISTS, XRANGE, XPENDING, XADD, XACK, XDEL, XLEN, DEL, SREM",
	"inbox dead":      "XRANGE, XADD, XACK, XDEL",
	"dead retry":      "XRANGE, HEXISTS, ZSCORE, TIME, GET, XADD, SADD, XDEL",
	"registry probe":  "TYPE, HSETEX, HPEXPIRE, HSET, HDEL",
	"registry put":    "GET, HEXISTS, TIME, SET, HSETEX or HSET + HPEXPIRE or ZSCORE + ZADD, PUBLISH",
	"registry remove": "HGET, ZSCORE, TIME, GET, HDEL, ZREM, SET, PUBLISH",
	"registry read":   "TIME, ZRANGEBYSCORE, GET, ZREM, HDEL, SET, PUBLISH, and around it MULTI, EXEC, HGETALL or HMGET, GET",
}

// aclHint adds, to an error that is a refusal by Redis's ACL, the commands
// the script needs, so the message names what to grant.
func aclHint(name string, err error) string {
	msg := err.Error()
	// NOPERM outside scripts; inside, Redis 7.0 says "can't run this
	// command" and Redis 8 / Valkey 9 "ACL failure in script".
	if !strings.Contains(msg, "NOPERM") && !strings.Contains(msg, "can't run this command") &&
		!strings.Contains(msg, "ACL failure in script") {
		return ""
	}
	return fmt.Sprintf(" (permission denied by the ACL: the Redis user needs EVALSHA, EVAL and the commands the %s script runs: %s; see docs/topologies.md)", name, scriptCommands[name])
}

func oneOrZero(name string, reply any) (bool, error) {
	n, ok := reply.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, unexpected(name, reply)
	}
	return n == 1, nil
}

func unexpected(name string, reply any) error {
	return fmt.Errorf("%s script: %w %#v", name, ErrUnexpectedReply, reply)
}

func termArg(term int64) string {
	if term <= 0 {
		return ""
	}
	return strconv.FormatInt(term, 10)
}

func pttlDuration(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}
