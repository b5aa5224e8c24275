package scripts

import (
	_ "embed"

	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed registry_probe.lua
	registryProbeSrc string
	//go:embed registry_put.lua
	registryPutSrc string
	//go:embed registry_remove.lua
	registryRemoveSrc string
	//go:embed registry_expire.lua
	registryExpireSrc string
)

// The process registry scripts. Their contracts are in the headers of the
// .lua files; the typed functions below are the only callers in herd.
var (
	// RegistryProbeScript is registry_probe.lua: which per-entry TTL commands
	// the server runs inside scripts.
	RegistryProbeScript = redis.NewScript(registryProbeSrc)
	// RegistryPutScript is registry_put.lua: write an entry with its TTL and
	// announce a registration.
	RegistryPutScript = redis.NewScript(registryPutSrc)
	// RegistryRemoveScript is registry_remove.lua: delete an entry, optionally
	// only when it still holds a given value, and announce it.
	RegistryRemoveScript = redis.NewScript(registryRemoveSrc)
	// RegistryExpireScript is registry_expire.lua: the emulated backend's
	// expiry, which removes and announces the expired entries; RegistryRead
	// runs it atomically with the read.
	RegistryExpireScript = redis.NewScript(registryExpireSrc)
)

// The TTL modes of RegistryPut, one per registry backend.
const (
	// TTLNative is HSETEX key PX ttl FIELDS 1 id value (Redis 8, Valkey 9).
	TTLNative = "native"
	// TTLHPExpire is HSET followed by HPEXPIRE (Redis 7.4+).
	TTLHPExpire = "hpexpire"
	// TTLEmulated is HSET plus the entry's deadline in Keys.ProcessesExpiry.
	TTLEmulated = "emulated"
)

// registryProbeField is the field the probe writes and deletes again. It
// contains a space, which ValidateName refuses, so it names no process.
const registryProbeField = "herd probe"

// RegistryProbe runs registry_probe.lua and reports whether HSETEX (native)
// and HPEXPIRE work inside scripts on the server behind c.
func RegistryProbe(ctx context.Context, c redis.Scripter, k Keys) (native, hpexpire bool, err error) {
	reply, err := run(ctx, c, RegistryProbeScript, "registry probe", []string{k.Processes}, registryProbeField)
	if err != nil {
		return false, false, err
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != 2 {
		return false, false, unexpected("registry probe", reply)
	}
	n, ok1 := arr[0].(int64)
	h, ok2 := arr[1].(int64)
	if !ok1 || !ok2 {
		return false, false, unexpected("registry probe", reply)
	}
	return n == 1, h == 1, nil
}

// Put is the input of RegistryPut.
type Put struct {
	// Mode is TTLNative, TTLHPExpire or TTLEmulated.
	Mode string
	// ID is the process id, the hash field; it must pass ValidateName.
	ID string
	// Value is the ProcessInfo JSON object.
	Value []byte
	// Role is "master" or "slave", copied into the notice.
	Role string
	// TTL is the entry's time to live; at least one millisecond.
	TTL time.Duration
	// Heartbeat announces the write only when the entry was absent; false
	// (a registration) announces it always.
	Heartbeat bool
}

// RegistryPut runs registry_put.lua. It reports whether the entry was absent
// (or expired) before the write.
func RegistryPut(ctx context.Context, c redis.Scripter, k Keys, p Put) (created bool, err error) {
	switch {
	case p.Mode != TTLNative && p.Mode != TTLHPExpire && p.Mode != TTLEmulated:
		return false, fmt.Errorf("registry put: unknown TTL mode %q", p.Mode)
	case p.TTL < time.Millisecond:
		return false, fmt.Errorf("registry put: TTL %s is shorter than one millisecond", p.TTL)
	case len(p.Value) < 2 || p.Value[0] != '{' || p.Value[len(p.Value)-1] != '}':
		return false, fmt.Errorf("registry put: process info is not a JSON object")
	case p.Role != "master" && p.Role != "slave":
		return false, fmt.Errorf("registry put: role %q is neither master nor slave", p.Role)
	}
	if err := ValidateName("process id", p.ID); err != nil {
		return false, fmt.Errorf("registry put: %w", err)
	}
	op := "register"
	if p.Heartbeat {
		op = "heartbeat"
	}
	reply, err := run(ctx, c, RegistryPutScript, "registry put",
		[]string{k.Processes, k.ProcessesExpiry},
		p.Mode, p.ID, p.Value, p.TTL.Milliseconds(), op, p.Role, k.RegistryEvents)
	if err != nil {
		return false, err
	}
	return oneOrZero("registry put", reply)
}

// RegistryRemove runs registry_remove.lua. With guard non-nil it deletes the
// entry only while it holds exactly *guard. reason goes into the notice; ""
// means the process unregistered itself. It reports whether a live entry was
// deleted.
func RegistryRemove(ctx context.Context, c redis.Scripter, k Keys, id string, guard *string, reason string) (bool, error) {
	if err := ValidateName("process id", id); err != nil {
		return false, fmt.Errorf("registry remove: %w", err)
	}
	if reason != "" {
		if err := ValidateName("reason", reason); err != nil {
			return false, fmt.Errorf("registry remove: %w", err)
		}
	}
	guarded, value := "", ""
	if guard != nil {
		guarded, value = "1", *guard
	}
	reply, err := run(ctx, c, RegistryRemoveScript, "registry remove",
		[]string{k.Processes, k.ProcessesExpiry}, id, guarded, value, reason, k.RegistryEvents)
	if err != nil {
		return false, err
	}
	return oneOrZero("registry remove", reply)
}

// RegistryRead is the emulated backend's read: it removes the entries whose
// deadline has passed (registry_expire.lua) and reads the entry of id, or
// every entry when id is "", in one MULTI/EXEC, so that the read sees no
// expired entry and the entries come back as a plain HGETALL reply. It
// returns the live entries read (field -> value) and the ids it removed.
func RegistryRead(ctx context.Context, c redis.Cmdable, k Keys, id string) (entries map[string]string, removed []string, err error) {
	const name = "registry read"
	keys := []string{k.Processes, k.ProcessesExpiry}
	for cached := true; ; cached = false {
		pipe := c.TxPipeline()
		var expire *redis.Cmd
		if cached {
			expire = pipe.EvalSha(ctx, RegistryExpireScript.Hash(), keys, k.RegistryEvents)
		} else {
			expire = pipe.Eval(ctx, registryExpireSrc, keys, k.RegistryEvents)
		}
		var all *redis.MapStringStringCmd
		var one *redis.StringCmd
		if id == "" {
			all = pipe.HGetAll(ctx, k.Processes)
		} else {
			one = pipe.HGet(ctx, k.Processes, id)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		read := redis.Cmder(all)
		if all == nil {
			read = one
		}
		if err := expire.Err(); err != nil {
			if strings.HasPrefix(err.Error(), "EXECABORT") && read.Err() != nil && !errors.Is(read.Err(), redis.Nil) &&
				!strings.HasPrefix(read.Err().Error(), "EXECABORT") {
				// Redis refused to queue the read (an ACL without HGETALL, say):
				// that is the cause, not the aborted transaction.
				err = read.Err()
				return nil, nil, fmt.Errorf("%s: %w%s", name, err, aclHint(name, err))
			}
			if cached && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				continue // the server has not cached the script: send it whole
			}
			return nil, nil, fmt.Errorf("%s: expiry script: %w%s", name, err, aclHint(name, err))
		}
		gone, ok := expire.Val().([]any)
		if !ok {
			return nil, nil, unexpected(name, expire.Val())
		}
		for _, g := range gone {
			s, ok := g.(string)
			if !ok {
				return nil, nil, unexpected(name, expire.Val())
			}
			removed = append(removed, s)
		}
		if all != nil {
			entries, err = all.Result()
		} else {
			var v string
			v, err = one.Result()
			switch {
			case errors.Is(err, redis.Nil):
				entries, err = map[string]string{}, nil
			case err == nil:
				entries = map[string]string{id: v}
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w%s", name, err, aclHint(name, err))
		}
		return entries, removed, nil
	}
}
