package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/beat"
	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

// Backend names how the registry gives each entry its own TTL.
type Backend string

// The backends. All give the same observable behaviour; they differ in the
// commands the server must run and in what a read costs (see
// docs/redis-versions.md).
const (
	// BackendAuto picks the first backend the server runs, in the order
	// native, hpexpire, emulated, by trying the commands once in New.
	BackendAuto Backend = "auto"
	// BackendNative writes entries with HSETEX ... PX (Redis 8.0+, Valkey 9.0+).
	BackendNative Backend = "native"
	// BackendHPExpire writes entries with HSET then HPEXPIRE in one script
	// (Redis 7.4+).
	BackendHPExpire Backend = "hpexpire"
	// BackendEmulated keeps each entry's deadline (server TIME in ms) in the
	// sorted set Keys.ProcessesExpiry; reads remove expired entries first, in
	// the same script. It runs on every server with Lua scripting.
	BackendEmulated Backend = "emulated"
)

// pickBackend returns the backend to use on a server that answered the
// probe with p: want, when the server runs it, or the best one it runs when
// want is BackendAuto.
func pickBackend(p Probed, want Backend) (Backend, error) {
	if want == BackendAuto {
		return p.best(), nil
	}
	if !p.runs(want) {
		return "", fmt.Errorf("%w: %s needs %s", ErrBackendUnsupported, want, backendNeeds[want])
	}
	return want, nil
}

// backendNeeds names what the server must run for the backends that not
// every server runs.
var backendNeeds = map[Backend]string{
	BackendNative:   "HSETEX ... PX (Redis 8.0+, Valkey 9.0+)",
	BackendHPExpire: "HPEXPIRE (Redis 7.4+)",
}

// runs reports whether the server that answered p runs backend b (one of
// the three; every server runs the emulated one).
func (p Probed) runs(b Backend) bool {
	switch b {
	case BackendNative:
		return p.Native
	case BackendHPExpire:
		return p.HPExpire
	}
	return true
}

// best returns the first backend the server that answered p runs, in the
// order native, hpexpire, emulated (BackendAuto's choice).
func (p Probed) best() Backend {
	for _, b := range []Backend{BackendNative, BackendHPExpire} {
		if p.runs(b) {
			return b
		}
	}
	return BackendEmulated
}

// store keeps the registry's entries, each with its own TTL, as its
// backend says. Every method is one round trip and safe for concurrent use.
// When Redis refuses a command because a registry key holds another type
// than herd writes (someone else wrote it), the error wraps ErrCorruptEntry
// and names the keys, which Redis's WRONGTYPE does not.
//
// With the native and the hpexpire backend the server expires each hash
// field itself, so reads are plain HGETALL and HGET and never return an
// expired entry; the two differ only in the command registry_put.lua uses.
// The emulated backend keeps each entry's deadline (server TIME + TTL, in
// ms) in the sorted set Keys.ProcessesExpiry: writes set both in one
// script, and every read runs registry_expire.lua, which deletes and
// announces the entries whose deadline has passed, in one MULTI with its
// HGETALL or HMGET (and the version counter's GET), so no read returns an
// expired entry.
type store struct {
	mode string // rdb.TTLNative, TTLHPExpire or TTLEmulated, the names of the backends
	c    redis.UniversalClient
	k    keyspace.Keys
}

// put writes the entry of p.ID (p.Fallback instead when a master write is
// fenced) and reports whether it was absent before. send, when not nil,
// sends the write instead of rdb.RegistryPut.
func (s store) put(ctx context.Context, p rdb.Put, send beat.Sender) (rdb.Stored, error) {
	p.Mode = s.mode
	if send == nil {
		send = func(ctx context.Context, p rdb.Put) (rdb.Stored, error) {
			return rdb.RegistryPut(ctx, s.c, s.k, p)
		}
	}
	st, err := send(ctx, p)
	return st, s.check(err)
}

// remove deletes the entry of id (only while it holds *guard when guard is
// not nil) and returns the version minted for the deletion, 0 when no live
// entry was deleted.
func (s store) remove(ctx context.Context, id string, guard *string, reason string) (int64, error) {
	v, err := rdb.RegistryRemove(ctx, s.c, s.k, id, guard, reason)
	return v, s.check(err)
}

// removeOwn deletes the entry of id unless another incarnation than
// incarnation wrote it; with no incarnation, whoever wrote it.
func (s store) removeOwn(ctx context.Context, id, incarnation string) (int64, error) {
	if incarnation == "" {
		return s.remove(ctx, id, nil, "")
	}
	v, err := rdb.RegistryRemoveOwn(ctx, s.c, s.k, id, incarnation)
	return v, s.check(err)
}

// read returns the live entries of ids, or all live entries when ids is
// empty, the ids it removed because they had expired (emulated only), and
// the lock's holder at the read (View.Master), in one round trip.
// With versioned it also returns the registry's version as of the read,
// atomically; without, the view's Version may be 0. The read is a
// transaction with the version counter when versioned, of several ids, or
// emulated (whose expiry makes it one anyway), and a plain HGETALL or HGET
// otherwise.
func (s store) read(ctx context.Context, ids []string, versioned bool) (rdb.RegistryView, error) {
	emulated := s.mode == rdb.TTLEmulated
	if versioned || len(ids) > 1 || emulated {
		view, err := rdb.RegistryRead(ctx, s.c, s.k, emulated, ids...)
		return view, s.check(err)
	}
	if len(ids) == 0 {
		return s.readAll(ctx)
	}
	return s.readOne(ctx, ids[0])
}

// readAll is read's plain HGETALL, with the lock's holder, in one
// pipeline.
func (s store) readAll(ctx context.Context) (rdb.RegistryView, error) {
	pipe := s.c.Pipeline()
	holder := rdb.QueueHolder(ctx, pipe, s.k)
	all := pipe.HGetAll(ctx, s.k.Processes)
	_, _ = pipe.Exec(ctx) // errors are read per command
	master, err := rdb.ReadHolder(holder)
	if err != nil {
		return rdb.RegistryView{}, err
	}
	m, err := all.Result()
	return rdb.RegistryView{Entries: m, Master: master}, s.check(err)
}

// readOne is read's plain HGET of id, with the lock's holder, in one
// pipeline.
func (s store) readOne(ctx context.Context, id string) (rdb.RegistryView, error) {
	pipe := s.c.Pipeline()
	holder := rdb.QueueHolder(ctx, pipe, s.k)
	one := pipe.HGet(ctx, s.k.Processes, id)
	_, _ = pipe.Exec(ctx) // errors are read per command
	master, err := rdb.ReadHolder(holder)
	if err != nil {
		return rdb.RegistryView{}, err
	}
	v, err := one.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return rdb.RegistryView{Entries: map[string]string{}, Master: master}, nil
	case err != nil:
		return rdb.RegistryView{}, s.check(err)
	}
	return rdb.RegistryView{Entries: map[string]string{id: v}, Master: master}, nil
}

// check turns Redis's WRONGTYPE into ErrCorruptEntry naming the keys.
func (s store) check(err error) error {
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		return err
	}
	what := fmt.Sprintf("key %q is not a hash", s.k.Processes)
	if s.mode == rdb.TTLEmulated {
		what = fmt.Sprintf("key %q is not a hash or key %q is not a sorted set", s.k.Processes, s.k.ProcessesExpiry)
	}
	return fmt.Errorf("%w: %s: %w", ErrCorruptEntry, what, err)
}

// parseBackend accepts the names of the constants, case-insensitively; "" is
// BackendAuto.
func parseBackend(b Backend) (Backend, error) {
	switch s := Backend(strings.ToLower(string(b))); s {
	case "", BackendAuto:
		return BackendAuto, nil
	case BackendNative, BackendHPExpire, BackendEmulated:
		return s, nil
	}
	return "", fmt.Errorf("unknown Backend %q (want auto, native, hpexpire or emulated)", string(b))
}

// ttlOf is the TTL actually stored: whole milliseconds, at least one.
func ttlOf(d time.Duration) time.Duration {
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}
