package scripts

import (
	_ "embed"

	"context"
	"fmt"
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
	//go:embed registry_read.lua
	registryReadSrc string
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
	// RegistryReadScript is registry_read.lua: the emulated backend's read,
	// which first removes and announces the expired entries.
	RegistryReadScript = redis.NewScript(registryReadSrc)
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

// RegistryRead runs registry_read.lua: it removes the entries whose emulated
// deadline has passed and then reads the entry of id, or every entry when id
// is "". It returns the live entries read (field -> value) and the ids it
// removed.
func RegistryRead(ctx context.Context, c redis.Scripter, k Keys, id string) (entries map[string]string, removed []string, err error) {
	reply, err := run(ctx, c, RegistryReadScript, "registry read",
		[]string{k.Processes, k.ProcessesExpiry}, id, k.RegistryEvents)
	if err != nil {
		return nil, nil, err
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != 2 {
		return nil, nil, unexpected("registry read", reply)
	}
	gone, ok1 := arr[0].([]any)
	flat, ok2 := arr[1].([]any)
	if !ok1 || !ok2 || len(flat)%2 != 0 {
		return nil, nil, unexpected("registry read", reply)
	}
	for _, g := range gone {
		s, ok := g.(string)
		if !ok {
			return nil, nil, unexpected("registry read", reply)
		}
		removed = append(removed, s)
	}
	entries = make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		f, ok1 := flat[i].(string)
		v, ok2 := flat[i+1].(string)
		if !ok1 || !ok2 {
			return nil, nil, unexpected("registry read", reply)
		}
		entries[f] = v
	}
	return entries, removed, nil
}
