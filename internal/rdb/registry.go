package rdb

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
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
// .lua files; the typed functions of this package are the only callers in
// herd.
var (
	// registryProbeScript is registry_probe.lua: which per-entry TTL commands
	// the server runs inside scripts.
	registryProbeScript = redis.NewScript(registryProbeSrc)
	// registryPutScript is registry_put.lua: write an entry with its TTL and
	// announce a registration.
	registryPutScript = redis.NewScript(withWrites(registryPutSrc))
	// registryRemoveScript is registry_remove.lua: delete an entry, optionally
	// only when it still holds a given value, and announce it.
	registryRemoveScript = redis.NewScript(withWrites(registryRemoveSrc))
	// registryExpireScript is registry_expire.lua: the emulated backend's
	// expiry, which removes and announces the expired entries; RegistryRead
	// runs it atomically with the read.
	registryExpireScript = redis.NewScript(withWrites(registryExpireSrc))
)

// The TTL modes of RegistryPut, one per registry backend.
const (
	// TTLNative is HSETEX key PX ttl FIELDS 1 id value (Redis 8, Valkey 9).
	TTLNative = "native"
	// TTLHPExpire is HSET followed by HPEXPIRE (Redis 7.4+).
	TTLHPExpire = "hpexpire"
	// TTLEmulated is HSET plus the entry's deadline in keyspace.Keys.ProcessesExpiry.
	TTLEmulated = "emulated"
)

// registryKeys are the KEYS of the registry scripts that take three.
func registryKeys(k keyspace.Keys) []string {
	return []string{k.Processes, k.ProcessesExpiry, k.ProcessesVersion}
}

// registryProbeField is the field the probe writes and deletes again. It
// contains a space, which keyspace.ValidateName refuses, so it names no process.
const registryProbeField = "herd probe"

// RegistryProbe runs registry_probe.lua and reports whether HSETEX (native)
// and HPEXPIRE work inside scripts on the server behind c.
func RegistryProbe(ctx context.Context, c redis.Scripter, k keyspace.Keys) (native, hpexpire bool, err error) {
	reply, err := run(ctx, c, registryProbeScript, "registry probe", []string{k.Processes}, registryProbeField)
	if err != nil {
		return false, false, err
	}
	return parseRegistryProbe(reply)
}

// RegistryProbeCall is the registry probe queued in a pipeline by
// QueueRegistryProbe; its Result is readable once the pipeline has run.
type RegistryProbeCall struct{ cmd *redis.Cmd }

// QueueRegistryProbe queues registry_probe.lua in pipe, so that a caller
// can send the probe together with commands of its own, in one round trip
// (masterelection's Start does). It queues EVAL with the script's source,
// not EVALSHA: a pipeline cannot fall back from EVALSHA to EVAL by itself,
// and a NOSCRIPT would cost a second round trip on a server that has not
// seen the script, while EVAL costs only the script's bytes on one that has
// (1.4 kB; a server that has it cached finds it by digest and does
// not compile it again).
func QueueRegistryProbe(ctx context.Context, pipe redis.Pipeliner, k keyspace.Keys) *RegistryProbeCall {
	return &RegistryProbeCall{cmd: pipe.Eval(ctx, registryProbeSrc, []string{k.Processes}, registryProbeField)}
}

// Result is what RegistryProbe would have returned: the reply of the queued
// probe, read after the pipeline ran, with its errors wrapped alike.
func (p *RegistryProbeCall) Result() (native, hpexpire bool, err error) {
	reply, err := queuedResult(p.cmd, "registry probe")
	if err != nil {
		return false, false, err
	}
	return parseRegistryProbe(reply)
}

// parseRegistryProbe reads the reply of registry_probe.lua.
func parseRegistryProbe(reply any) (native, hpexpire bool, err error) {
	f := fieldsOf(reply, 2)
	native, hpexpire = f.intAt(0) == 1, f.intAt(1) == 1
	if !f.ok {
		return false, false, unexpected("registry probe", reply)
	}
	return native, hpexpire, nil
}

// Put is the input of RegistryPut.
type Put struct {
	// Mode is TTLNative, TTLHPExpire or TTLEmulated.
	Mode string
	// ID is the process id, the hash field; it must pass keyspace.ValidateName.
	ID string
	// Value is the ProcessInfo JSON object, with at least one member and no
	// "version" member: the script appends the version it mints.
	Value []byte
	// Role is "master" or "slave", copied into the notice.
	Role string
	// TTL is the entry's time to live; at least one millisecond.
	TTL time.Duration
	// Heartbeat announces the write only when the entry was absent; false
	// (a registration) announces it always.
	Heartbeat bool
	// Node is the node id that keyspace.Keys.Master must hold for a write with role
	// master to be stored; "" means ID.
	Node string
	// Term is the term that keyspace.Keys.Term must hold for a write with role
	// master to be stored; 0 never matches.
	Term int64
	// Fallback is what is written and announced, with role slave, when a
	// write with role master is refused: the ProcessInfo JSON object of the
	// same process as a slave. Required with role master; ignored otherwise.
	Fallback []byte
	// Incarnation names this run of the process ("" for none); Value
	// carries it as its "incarnation" member.
	Incarnation string
	// Quiet, with Incarnation set, refuses the write while the live entry
	// carries another incarnation and was last written less than Quiet
	// ago: another process runs under the same id. Stored.InUse then says
	// so and nothing is written. 0 never refuses.
	Quiet time.Duration
	// Last is the version of the writer's last write of this entry (the
	// Stored.Version it returned), 0 for none. A live entry that is still
	// that write is the writer's own: its incarnation is not decoded, which
	// makes a heartbeat cheaper inside Redis. It must be a version this
	// writer's own write returned: the entry it names counts as the
	// writer's, whatever incarnation it carries.
	Last int64
}

// Stored is the outcome of RegistryPut.
type Stored struct {
	// Created is true when the entry was absent (or expired) before the
	// write.
	Created bool
	// Version is the version the write minted, stored in the entry as its
	// "version" member and sent in the notice.
	Version int64
	// Fenced is true when the write had role master but keyspace.Keys.Master did not
	// hold Put.Node or keyspace.Keys.Term did not hold Put.Term: Put.Fallback was
	// written and announced instead, with role slave.
	Fenced bool
	// Holder is what keyspace.Keys.Master held when Fenced ("" when it was missing or
	// not a string).
	Holder string
	// HolderTerm is what keyspace.Keys.Term held when Fenced ("" when it was missing
	// or not a string).
	HolderTerm string
	// InUse is set when the write was refused by Put.Quiet: the live entry
	// is another incarnation's, written less than Quiet ago. Nothing was
	// written; the other fields are zero.
	InUse *InUse
}

// InUse describes the live entry that refused a write (Stored.InUse).
type InUse struct {
	// Incarnation is the entry's incarnation.
	Incarnation string
	// Age is how long ago the entry was last written, on the server's clock.
	Age time.Duration
	// Identifier is the entry's "identifier" member ("" when none).
	Identifier string
}

// RegistryPut runs registry_put.lua: it writes the entry p.ID with its TTL
// and a new version, and announces it. A write with role master is stored only while p.Node
// holds the lock under p.Term, checked in the same script; otherwise
// p.Fallback is written with role slave and the result has Fenced set.
func RegistryPut(ctx context.Context, c redis.Scripter, k keyspace.Keys, p Put) (Stored, error) {
	keys, args, err := putCall(k, p)
	if err != nil {
		return Stored{}, err
	}
	reply, err := run(ctx, c, registryPutScript, "registry put", keys, args...)
	if err != nil {
		return Stored{}, err
	}
	return parsePut(reply)
}

// putCall checks p and returns the keys and arguments of registry_put.lua
// for it.
func putCall(k keyspace.Keys, p Put) (keys []string, args []any, err error) {
	if err := checkPut(p); err != nil {
		return nil, nil, err
	}
	node := cmp.Or(p.Node, p.ID)
	op := "register"
	if p.Heartbeat {
		op = "heartbeat"
	}
	fallback := p.Fallback
	if p.Role != "master" {
		fallback = nil
	}
	return []string{k.Processes, k.ProcessesExpiry, k.Master, k.Term, k.ProcessesVersion},
		[]any{p.Mode, p.ID, p.Value, p.TTL.Milliseconds(), op, p.Role, k.RegistryEvents, node, termArg(p.Term), fallback,
			p.Incarnation, quietArg(p.Incarnation, p.Quiet), lastArg(p.Last)},
		nil
}

// The TTL modes and roles RegistryPut knows.
var (
	ttlModes = []string{TTLNative, TTLHPExpire, TTLEmulated}
	roles    = []string{"master", "slave"}
)

// checkPut returns what makes p a write registry_put.lua must not be sent,
// or nil: the checks of the entry, then those of its role.
func checkPut(p Put) error {
	switch {
	case !slices.Contains(ttlModes, p.Mode):
		return fmt.Errorf("registry put: unknown TTL mode %q", p.Mode)
	case p.TTL < time.Millisecond:
		return fmt.Errorf("registry put: TTL %s is shorter than one millisecond", p.TTL)
	case !isObject(p.Value):
		return fmt.Errorf("registry put: process info is not a JSON object")
	}
	if err := checkRole(p); err != nil {
		return err
	}
	if err := keyspace.ValidateName("process id", p.ID); err != nil {
		return fmt.Errorf("registry put: %w", err)
	}
	return nil
}

// checkRole returns what is wrong with p's role: one RegistryPut does not
// know, or a master write without the slave entry that replaces it when
// it is fenced (Put.Fallback).
func checkRole(p Put) error {
	switch {
	case !slices.Contains(roles, p.Role):
		return fmt.Errorf("registry put: role %q is neither master nor slave", p.Role)
	case p.Role == "master" && !isObject(p.Fallback):
		return fmt.Errorf("registry put: the fallback of a master write is not a JSON object")
	}
	return nil
}

// lastArg is registry_put.lua's ARGV[13]: the version, "" for none.
func lastArg(v int64) string {
	if v <= 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

// quietArg is registry_put.lua's ARGV[12]: Quiet in whole milliseconds,
// rounded up so that a positive Quiet never becomes 0; 0 without an
// incarnation.
func quietArg(incarnation string, quiet time.Duration) int64 {
	if incarnation == "" || quiet <= 0 {
		return 0
	}
	return int64((quiet + time.Millisecond - 1) / time.Millisecond)
}

// parsePut reads the reply of registry_put.lua: {"in use", incarnation,
// age, identifier} when Put.Quiet refused the write, {created, version,
// fenced, holder, term} when it was done.
func parsePut(reply any) (Stored, error) {
	arr, _ := reply.([]any)
	read := storedWrite
	if len(arr) > 0 && arr[0] == "in use" {
		read = storedInUse
	}
	st, ok := read(arr)
	if !ok {
		return Stored{}, unexpected("registry put", reply)
	}
	return st, nil
}

// storedInUse reads an {"in use", incarnation, age, identifier} reply.
func storedInUse(arr []any) (Stored, bool) {
	f := fieldsOf(arr, 4)
	inc, age, who := f.strAt(1), f.intAt(2), f.strAt(3)
	if !f.ok || inc == "" {
		return Stored{}, false
	}
	return Stored{InUse: &InUse{Incarnation: inc, Age: time.Duration(max(age, 0)) * time.Millisecond, Identifier: who}}, true
}

// storedWrite reads a {created, version, fenced, holder, term} reply.
func storedWrite(arr []any) (Stored, bool) {
	f := fieldsOf(arr, 5)
	st := Stored{Created: f.flagAt(0), Version: f.intAt(1), Fenced: f.flagAt(2)}
	holder, term := f.strAt(3), f.strAt(4)
	if !f.ok || st.Version <= 0 {
		return Stored{}, false
	}
	if st.Fenced {
		st.Holder, st.HolderTerm = holder, term
	}
	return st, true
}

// isObject reports whether b looks like a JSON object with at least one
// member: the scripts splice members into it.
func isObject(b []byte) bool {
	return len(b) > 2 && b[0] == '{' && b[len(b)-1] == '}'
}

// RegistryRemove runs registry_remove.lua. With guard non-nil it deletes the
// entry only while it holds exactly *guard. reason goes into the notice; ""
// means the process unregistered itself. It returns the version minted for
// the deletion, or 0 when no live entry was deleted.
func RegistryRemove(ctx context.Context, c redis.Scripter, k keyspace.Keys, id string, guard *string, reason string) (int64, error) {
	guarded, value := "", ""
	if guard != nil {
		guarded, value = "1", *guard
	}
	return registryRemove(ctx, c, k, id, guarded, value, reason)
}

// RegistryRemoveOwn is RegistryRemove of a process leaving: it deletes the
// entry unless it carries another non-empty incarnation than incarnation
// (a later process under the same id wrote it), and returns 0 then.
func RegistryRemoveOwn(ctx context.Context, c redis.Scripter, k keyspace.Keys, id, incarnation string) (int64, error) {
	return registryRemove(ctx, c, k, id, "i", incarnation, "")
}

// registryRemove runs registry_remove.lua with the guard mode guarded
// ("", "1" or "i") and its value.
func registryRemove(ctx context.Context, c redis.Scripter, k keyspace.Keys, id, guarded, value, reason string) (int64, error) {
	if err := checkRemove(id, reason); err != nil {
		return 0, err
	}
	reply, err := run(ctx, c, registryRemoveScript, "registry remove",
		registryKeys(k), id, guarded, value, reason, k.RegistryEvents)
	if err != nil {
		return 0, err
	}
	v, ok := reply.(int64)
	if !ok || v < 0 {
		return 0, unexpected("registry remove", reply)
	}
	return v, nil
}

// checkRemove returns what makes id or reason unfit for registry_remove.lua
// (an empty reason is fit: the process unregistered itself), or nil.
func checkRemove(id, reason string) error {
	err := keyspace.ValidateName("process id", id)
	if err == nil && reason != "" {
		err = keyspace.ValidateName("reason", reason)
	}
	if err != nil {
		return fmt.Errorf("registry remove: %w", err)
	}
	return nil
}
