package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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
func parseCheck(k keyspace.Keys, reply any) (MasterState, error) {
	r, ok := readCheckReply(reply)
	if !ok {
		return MasterState{}, unexpected("check", reply)
	}
	st := MasterState{TermMissing: r.term == ""}
	if r.pttl != -2 {
		st.Exists, st.NodeID, st.TTL, st.Garbage = true, r.holder, pttlDuration(r.pttl), lockGarbage(k, r.holder, r.pttl)
	}
	if r.term != "" {
		var garbage string
		st.Term, garbage = termOf(k, r.term)
		st.TermGarbage = garbage != ""
		if st.Garbage == "" {
			st.Garbage = garbage
		}
	}
	if next, ok := parseSuccession(r.next); ok && st.Term != 0 && next.Term == st.Term {
		st.Next = next
	}
	return st, nil
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
	arr, ok := reply.([]any)
	if !ok || len(arr) != 4 {
		return checkReply{}, false
	}
	var ok1, ok2, ok3, ok4 bool
	r.holder, ok1 = arr[0].(string)
	r.term, ok2 = arr[1].(string)
	r.pttl, ok3 = arr[2].(int64)
	r.next, ok4 = arr[3].(string)
	return r, ok1 && ok2 && ok3 && ok4
}

// termOf reads raw, the content of the term key k.Term as check.lua
// returns it when the key exists: the term, or 0 and what is wrong with raw
// when it is not one herd can have minted.
func termOf(k keyspace.Keys, raw string) (term int64, garbage string) {
	t, err := strconv.ParseInt(raw, 10, 64)
	if err == nil && t >= 0 && t <= keyspace.MaxTerm {
		return t, ""
	}
	shown := raw
	if len(shown) > 64 { // garbage of any length: quote its start
		shown = shown[:64] + "…"
	}
	what := strconv.Quote(shown)
	if typ, ok := strings.CutPrefix(raw, "!"); ok {
		what = "a " + typ
	} else if err == nil && t > keyspace.MaxTerm || errors.Is(err, strconv.ErrRange) {
		what += " (above 2^53 - 1, the largest term herd can mint exactly)"
	}
	return 0, fmt.Sprintf("key %q holds %s, not a term", k.Term, what)
}
