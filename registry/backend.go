package registry

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
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

// backend stores the registry's entries, each with its own TTL. Every method
// is one round trip and safe for concurrent use.
type backend interface {
	// put writes the entry of p.ID (p.Fallback instead when a master write
	// is fenced) and reports whether it was absent before.
	put(ctx context.Context, p scripts.Put) (scripts.Stored, error)
	// remove deletes the entry of id (only while it holds *guard when guard
	// is not nil) and returns the version minted for the deletion, 0 when
	// no live entry was deleted.
	remove(ctx context.Context, id string, guard *string, reason string) (int64, error)
	// read returns the live entries of ids, or all live entries when ids is
	// empty, and the ids it removed because they had expired (emulated
	// only). With versioned it also returns the registry's version as of
	// the read, atomically (a transaction); without, the view's Version may
	// be 0.
	read(ctx context.Context, ids []string, versioned bool) (scripts.RegistryView, error)
}

// pickBackend returns the backend to use on a server that answered the
// probe with p: want, when the server runs it, or the best one it runs when
// want is BackendAuto.
func pickBackend(p Probed, want Backend) (Backend, error) {
	switch want {
	case BackendAuto:
		switch {
		case p.Native:
			return BackendNative, nil
		case p.HPExpire:
			return BackendHPExpire, nil
		}
		return BackendEmulated, nil
	case BackendNative:
		if !p.Native {
			return "", fmt.Errorf("%w: %s needs HSETEX ... PX (Redis 8.0+, Valkey 9.0+)", ErrBackendUnsupported, want)
		}
	case BackendHPExpire:
		if !p.HPExpire {
			return "", fmt.Errorf("%w: %s needs HPEXPIRE (Redis 7.4+)", ErrBackendUnsupported, want)
		}
	}
	return want, nil
}

func newBackend(b Backend, c redis.UniversalClient, k scripts.Keys) backend {
	if b == BackendEmulated {
		return typeChecked{emulated{c: c, k: k}, []string{k.Processes, k.ProcessesExpiry}}
	}
	return typeChecked{fieldTTL{mode: string(b), c: c, k: k}, []string{k.Processes}}
}

// typeChecked names the keys, and wraps ErrCorruptEntry, when Redis refuses
// a command because a registry key holds another type than herd writes
// (someone else wrote it): Redis's WRONGTYPE names neither.
type typeChecked struct {
	be   backend
	keys []string
}

func (t typeChecked) put(ctx context.Context, p scripts.Put) (scripts.Stored, error) {
	st, err := t.be.put(ctx, p)
	return st, t.check(err)
}

func (t typeChecked) remove(ctx context.Context, id string, guard *string, reason string) (int64, error) {
	v, err := t.be.remove(ctx, id, guard, reason)
	return v, t.check(err)
}

func (t typeChecked) read(ctx context.Context, ids []string, versioned bool) (scripts.RegistryView, error) {
	view, err := t.be.read(ctx, ids, versioned)
	return view, t.check(err)
}

func (t typeChecked) check(err error) error {
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		return err
	}
	what := fmt.Sprintf("key %q is not a hash", t.keys[0])
	if len(t.keys) == 2 {
		what = fmt.Sprintf("key %q is not a hash or key %q is not a sorted set", t.keys[0], t.keys[1])
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
