package rdb

import (
	"context"
	_ "embed" // next.lua
	"encoding/json"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

//go:embed next.lua
var nextSrc string

// nextScript is next.lua: store a master's succession while the lock is
// the writer's under its term.
var nextScript = redis.NewScript(nextSrc)

// NextSHA is the digest by which EVALSHA names next.lua.
var NextSHA = nextScript.Hash()

// Succession is the order in which slaves contend when the lock of Term
// is released or expires, as the master of Term published it under
// keyspace.Keys.Next: Order[0] contends at once, the others only later, each after
// a longer delay, and only when no one has taken the lock by then. It is
// a hint for speed and quiet, never for safety: the acquire script decides
// who gets the lock, and a missing, stale or forged succession only brings
// back the contention of every slave.
type Succession struct {
	Term  int64    `json:"term"`
	Order []string `json:"order"`
}

// Rank returns the place of nodeID in the order, or -1.
func (s Succession) Rank(nodeID string) int { return slices.Index(s.Order, nodeID) }

// successionOf reads raw, the content of keyspace.Keys.Next, as the
// succession of the master of term; zero when term is 0 or raw is empty,
// not a succession (garbage is ignored: it only costs speed) or another
// term's.
func successionOf(raw string, term int64) Succession {
	var s Succession
	if term <= 0 || raw == "" || json.Unmarshal([]byte(raw), &s) != nil || s.Term != term {
		return Succession{}
	}
	return s
}

// WriteSuccession stores s under k.Next with next.lua, only while nodeID
// holds the lock under s.Term; written is false, and nothing is written,
// otherwise.
func WriteSuccession(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, s Succession) (written bool, err error) {
	b, err := json.Marshal(s)
	if err != nil {
		return false, fmt.Errorf("encode succession: %w", err)
	}
	reply, err := run(ctx, c, nextScript, "next", []string{k.Master, k.Term, k.Next}, nodeID, termArg(s.Term), b)
	if err != nil {
		return false, err
	}
	return oneOrZero("next", reply)
}
