// Package wiretap records what a go-redis client sends, for herd's tests
// that count round trips and commands. A command sent alone is one round
// trip; a pipeline is one round trip of several commands.
//
// What it counts is what the code under test sends, never what the
// connection pool does: go-redis runs a new connection's handshake (HELLO,
// AUTH, SELECT, READONLY, CLIENT SETNAME/SETINFO/TRACKING) through the same
// hooks, and how many connections a pool opens depends on how the machine
// schedules the calls (a call that outlives its deadline on a busy machine
// drops its connection, and the next call dials again). A Tap leaves those
// out, so a count is the same on an idle machine and a busy one. herd never
// sends these commands itself. Only tests import it.
//
//	tap := &wiretap.Tap{}
//	client.AddHook(tap)
//	start := tap.Trips()
//	// ... the calls under test ...
//	trips := tap.Since(start) // e.g. ["evalsha", "get+evalsha"]
package wiretap

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Handshake reports whether cmd is one of the commands go-redis sends to set
// up a new connection, which a Tap leaves out.
func Handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "readonly", "client":
		return true
	}
	return false
}

// Tap is a go-redis hook (add it with AddHook) that records the round trips
// of one client, handshakes left out. Each round trip is recorded as the
// names of its commands joined with "+". The zero Tap names a command by
// cmd.Name(); set Name before adding the hook to name some commands
// otherwise (an EVALSHA by its script). A Tap is safe for concurrent use.
type Tap struct {
	// Name names a command in the record; nil means cmd.Name().
	Name func(redis.Cmder) string

	mu    sync.Mutex
	trips []string
	cmds  int
}

func (t *Tap) name(cmd redis.Cmder) string {
	if t.Name != nil {
		return t.Name(cmd)
	}
	return cmd.Name()
}

func (t *Tap) record(cmds []redis.Cmder) {
	names := make([]string, 0, len(cmds))
	for _, c := range cmds {
		if !Handshake(c) {
			names = append(names, t.name(c))
		}
	}
	if len(names) == 0 {
		return
	}
	t.mu.Lock()
	t.trips = append(t.trips, strings.Join(names, "+"))
	t.cmds += len(names)
	t.mu.Unlock()
}

// DialHook implements redis.Hook; it records nothing.
func (t *Tap) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: a command sent alone is a round trip.
func (t *Tap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline (or a MULTI/EXEC
// transaction) is one round trip.
func (t *Tap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t.record(cmds)
		return next(ctx, cmds)
	}
}

// Since returns the round trips recorded after mark i (a Trips).
func (t *Tap) Since(i int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.trips[min(i, len(t.trips)):])
}

// Take returns the round trips recorded since the last Take or Reset and
// forgets them.
func (t *Tap) Take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	trips := t.trips
	t.trips, t.cmds = nil, 0
	return trips
}

// Reset forgets everything recorded.
func (t *Tap) Reset() { _ = t.Take() }

// Trips returns how many round trips were recorded since the last Reset or
// Take: a count, or a mark for Since.
func (t *Tap) Trips() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.trips)
}

// Commands returns how many commands those round trips carried (a
// pipeline's one by one).
func (t *Tap) Commands() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cmds
}
