package rdb

import (
	"context"
	_ "embed" // handback.lua
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

//go:embed handback.lua
var handBackSrc string

// handBackScript is handback.lua: take the hand-back of a window while the
// lock is the caller's under its term.
var handBackScript = redis.NewScript(handBackSrc)

// HandBackSHA is the digest by which EVALSHA names handback.lua.
var HandBackSHA = handBackScript.Hash()

// HandBack is the outcome of TakeHandBack.
type HandBack struct {
	// Taken: the caller may hand over now; keyspace.Keys.HandBack holds its term
	// for the window.
	Taken bool
	// NotMaster: the lock is not the caller's under its term; nothing was
	// written.
	NotMaster bool
	// Wait is, when neither, how long the hand-back taken before lives on:
	// its remaining TTL, or -1 when keyspace.Keys.HandBack has no TTL (written by
	// something other than herd).
	Wait time.Duration
}

// TakeHandBack runs handback.lua: it takes the one hand-back of window for
// nodeID, the master under term, unless one was taken within the window.
func TakeHandBack(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, window time.Duration) (HandBack, error) {
	reply, err := run(ctx, c, handBackScript, "hand back", []string{k.Master, k.Term, k.HandBack},
		nodeID, termArg(term), max(window.Milliseconds(), 1))
	if err != nil {
		return HandBack{}, err
	}
	f := fieldsOf(reply, 2)
	h, ok := handBackOf(f.intAt(0), f.intAt(1))
	if !f.ok || !ok {
		return HandBack{}, unexpected("hand back", reply)
	}
	return h, nil
}

// handBackOf reads handback.lua's reply {state, pttl}: 1 taken, -1 not the
// master, 0 taken before and pttl its rest (-1 without a TTL). ok is false
// for another state, or a PTTL of -2 (the key expiring between SET and
// PTTL cannot happen in a script).
func handBackOf(state, pttl int64) (h HandBack, ok bool) {
	switch state {
	case 1:
		return HandBack{Taken: true}, true
	case -1:
		return HandBack{NotMaster: true}, true
	case 0:
		return HandBack{Wait: pttlDuration(pttl)}, pttl >= -1
	}
	return HandBack{}, false
}
