package rdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/keyspace"
)

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
	// Next is the succession the master of Term published (keyspace.Keys.Next);
	// zero when there is none for Term (missing, of another term, or not a
	// succession).
	Next Succession
}

// Check runs check.lua.
func Check(ctx context.Context, c redis.Scripter, k keyspace.Keys) (MasterState, error) {
	reply, err := run(ctx, c, checkScript, "check", []string{k.Master, k.Term, k.Next})
	if err != nil {
		return MasterState{}, err
	}
	return parseCheck(k, reply)
}

// CheckCall is the check script queued in a pipeline by QueueCheck; its
// Result is readable once the pipeline has run.
type CheckCall struct {
	k   keyspace.Keys
	cmd *redis.Cmd
}

// QueueCheck queues check.lua in pipe, so that a caller can send the check
// together with commands of its own in one round trip (masterelection's
// Start does). It queues EVAL with the script's source, as
// QueueRegistryProbe does, so the round trip needs no NOSCRIPT fallback.
func QueueCheck(ctx context.Context, pipe redis.Pipeliner, k keyspace.Keys) *CheckCall {
	return &CheckCall{k: k, cmd: pipe.Eval(ctx, checkSrc, []string{k.Master, k.Term, k.Next})}
}

// Result is what Check would have returned: the reply of the queued check,
// read after the pipeline ran, with its errors wrapped alike.
func (c *CheckCall) Result() (MasterState, error) {
	reply, err := queuedResult(c.cmd, "check")
	if err != nil {
		return MasterState{}, err
	}
	return parseCheck(c.k, reply)
}

// parseCheck reads the reply of check.lua on the keys k.
func parseCheck(k keyspace.Keys, reply any) (MasterState, error) {
	r, ok := readCheckReply(reply)
	if !ok {
		return MasterState{}, unexpected("check", reply)
	}
	var st MasterState
	if r.pttl != -2 {
		st.Exists, st.NodeID, st.TTL, st.Garbage = true, r.holder, pttlDuration(r.pttl), lockGarbage(k, r.holder, r.pttl)
	}
	st.readTerm(k, r.term)
	st.Next = successionOf(r.next, st.Term)
	return st, nil
}

// readTerm sets st's term fields from raw, the term key as check.lua
// returns it ("" when the key is missing). What is wrong with the lock is
// named before what is wrong with the term.
func (st *MasterState) readTerm(k keyspace.Keys, raw string) {
	if raw == "" {
		st.TermMissing = true
		return
	}
	var garbage string
	st.Term, garbage = termOf(k, raw)
	st.TermGarbage = garbage != ""
	st.Garbage = cmp.Or(st.Garbage, garbage)
}

// checkReply is the reply of check.lua, {holder, term, pttl, next}, its
// elements as the script's header describes them.
type checkReply struct {
	holder, term string
	pttl         int64
	next         string
}

// readCheckReply reads the four elements of check.lua's reply; ok is false
// for a reply of another shape.
func readCheckReply(reply any) (r checkReply, ok bool) {
	f := fieldsOf(reply, 4)
	r = checkReply{holder: f.strAt(0), term: f.strAt(1), pttl: f.intAt(2), next: f.strAt(3)}
	return r, f.ok
}

// termOf reads raw, the content of the term key k.Term as check.lua
// returns it when the key exists: the term, or 0 and what is wrong with raw
// when it is not one herd can have minted.
func termOf(k keyspace.Keys, raw string) (term int64, garbage string) {
	t, err := strconv.ParseInt(raw, 10, 64)
	if err == nil && t >= 0 && t <= keyspace.MaxTerm {
		return t, ""
	}
	return 0, fmt.Sprintf("key %q holds %s, not a term", k.Term, notATerm(raw, t, err))
}

// notATerm describes raw, a term key's content that is not a term, as
// termOf parsed it (t, err): "a <type>" for a key check.lua found of
// another type ("!<type>"), otherwise the start of raw, quoted, and why a
// number is refused when it is above the largest term.
func notATerm(raw string, t int64, err error) string {
	if typ, ok := strings.CutPrefix(raw, "!"); ok {
		return "a " + typ
	}
	what := strconv.Quote(wire.Truncate(raw)) // garbage of any length: quote its start
	if err == nil && t > keyspace.MaxTerm || errors.Is(err, strconv.ErrRange) {
		what += " (above 2^53 - 1, the largest term herd can mint exactly)"
	}
	return what
}
