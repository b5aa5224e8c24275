package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/beat"
	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/keyspace"
)

// DefaultProcessTTL is the default Config.ProcessTTL, the specification's
// PROCESS_TTL of 45 seconds.
const DefaultProcessTTL = 45 * time.Second

// Config configures a Registry. The zero value is usable; New fills in the
// defaults and keeps its own copy.
type Config struct {
	// ProcessTTL is how long an entry stays listed after its last
	// registration or heartbeat, stored in whole milliseconds. It must exceed
	// twice the longest a live process goes between two writes of its entry
	// (masterelection.Config checks it with the election's other timings).
	// Default: 45s; zero
	// means the default, negative is an error.
	ProcessTTL time.Duration
	// Backend chooses how each entry gets its TTL. Default: BackendAuto, which
	// tries the commands once in New.
	Backend Backend
	// Logger receives the backend chosen, re-registrations and expired
	// entries removed by reads. Default: the zero Logger, which logs nothing.
	Logger zerolog.Logger
	// Quiet makes Register and Heartbeat refuse (an *InUseError, nothing
	// written) to replace a live entry that carries another non-empty
	// ProcessInfo.Incarnation than the one written and was written less
	// than Quiet ago: another process runs under the id. Once that entry
	// has gone Quiet without a write (its process stopped), it is
	// replaced. Set it above the longest time between two writes of a live
	// process. Default: 0, entries are always replaced.
	Quiet time.Duration
	// OnError receives problems that do not fail the call that met them: a
	// corrupt entry skipped by a read, once per field and value. It is called
	// synchronously by the goroutine doing the read, possibly by several
	// goroutines at once, so it must be safe for concurrent use and should
	// return quickly. Default: nil, such problems are only logged.
	OnError func(error)
}

// Validate reports every problem of c at once; the error wraps
// ErrInvalidConfig. New calls it.
func (c Config) Validate() error {
	_, backendErr := parseBackend(c.Backend)
	return invalid(notNegative("ProcessTTL", c.ProcessTTL), notNegative("Quiet", c.Quiet), backendErr)
}

// notNegative is the problem of the duration setting name when d is
// negative; nil when it is not.
func notNegative(name string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s %s is negative", name, d)
	}
	return nil
}

// invalid joins the problems of a configuration (nil for each check that
// found none) under ErrInvalidConfig; nil when there are none.
func invalid(problems ...error) error {
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Registry is the process registry of one election: the hash
// Keys.Processes, field = process id, value = ProcessInfo JSON, each entry
// with its own TTL. It also reads the master's info from Keys.MasterProcess.
//
// A Registry is safe for concurrent use. It remembers the last info of every
// process registered through it, which Heartbeat writes back; it starts no
// goroutine and needs no Close.
type Registry struct {
	c     redis.UniversalClient
	keys  keyspace.Keys
	cfg   Config
	clock clock.Clock // lastSeen and registeredAt; a test's, from New's ctx
	kind  Backend
	be    store

	mu       sync.Mutex
	own      map[string]*owned // processes registered through r, by process id
	reported map[string]uint64 // corrupt fields already reported -> hash of the value
	order    []string          // the sorted ids of the last snapshot (snapshotOf)
}

// owned is the last known info of a process registered through a Registry.
type owned struct {
	mu   sync.Mutex // held across each write, so one process's writes never overtake each other
	info ProcessInfo
	// written is the last write stored: its version and the incarnation
	// it carried; a write of that incarnation names it (rdb.Put.Last).
	written    lastWrite
	registered bool // info has been stored once
	gone       bool // Unregister was called
}

// lastWrite is the last write of a process's entry through a Registry.
type lastWrite struct {
	version     int64 // its version (0: none)
	incarnation string
}

// of is rdb.Put.Last for a write of info: the last write's version when it
// carried info's incarnation, else 0. A write of another incarnation under
// the same id (a process restarted, through the same Registry) must not
// take the entry for its own: the script then reads the entry's
// incarnation, and refuses while that one is live.
func (w lastWrite) of(info ProcessInfo) int64 {
	if w.incarnation != info.Incarnation {
		return 0
	}
	return w.version
}

// encodeEntry encodes info for the registry. It calls MarshalJSON itself:
// json.Marshal would only check and compact its output once more.
func encodeEntry(info ProcessInfo) ([]byte, error) {
	b, err := info.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidProcess, err)
	}
	return b, nil
}

// asSlave is info with the role a process that is not master has.
func asSlave(info ProcessInfo) ProcessInfo {
	info.Role, info.Term = RoleSlave, 0
	return info
}

// New returns a Registry on client for the keys of one election. It probes
// the server once, in one round trip, to choose the backend (or to check
// that the server runs opts.Backend). The probe writes and deletes a field
// of Keys.Processes within one script, so no reader ever sees it, and fails
// when that key holds something other than a hash.
//
// With a *redis.ClusterClient the keys get the Cluster hash tag whatever
// keys says, as the election's do. Set ContextTimeoutEnabled on client:
// go-redis ignores context deadlines otherwise.
func New(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, opts Config) (*Registry, error) {
	return newRegistry(ctx, client, keys, opts, nil)
}

// Probed is the server's answer to the backend probe that New sends
// (rdb.RegistryProbe; rdb.QueueRegistryProbe in a pipeline, or
// rdb.Ask and rdb.AskTaking with other questions).
type Probed struct {
	// Native: HSETEX ... PX works inside scripts (Redis 8.0+, Valkey 9.0+).
	Native bool
	// HPExpire: HPEXPIRE works inside scripts (Redis 7.4+).
	HPExpire bool
}

// NewProbed is New for a caller that has already probed the server behind
// client with a call of its own (Start of masterelection asks the probe
// with its other first questions, rdb.Ask, when it does not write the
// first registration in that call, rdb.AskTaking, through a registry
// that has not chosen its backend yet: newPending): it
// chooses the backend from p, as New does from its probe's answer, and asks
// Redis nothing. A probe that failed (keys.Processes holds something other
// than a hash, the server is unreachable) has no answer to give: call New,
// which probes again and reports the failure.
func NewProbed(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, opts Config, p Probed) (*Registry, error) {
	return newRegistry(ctx, client, keys, opts, &p)
}

// newRegistry is New, and NewProbed when probed is not nil.
func newRegistry(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, opts Config, probed *Probed) (*Registry, error) {
	r, want, err := newUnchosen(ctx, client, keys, opts)
	if err != nil {
		return nil, err
	}
	kind, err := chooseBackend(ctx, client, r.keys, probed, want)
	if err != nil {
		return nil, err
	}
	r.use(kind)
	return r, nil
}

// newUnchosen is a Registry with its keys and configuration checked,
// that has not chosen its backend: want, the one configured. It takes no
// write until use sets the backend, except a registration whose send
// chooses the backend itself (newPending).
func newUnchosen(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, opts Config) (r *Registry, want Backend, err error) {
	if nilclient.Is(client) {
		return nil, "", fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	keys, err = keysFor(client, keys)
	if err != nil {
		return nil, "", err
	}
	if err := opts.Validate(); err != nil {
		return nil, "", err
	}
	opts.ProcessTTL = ttlOf(cmp.Or(opts.ProcessTTL, DefaultProcessTTL))
	want, _ = parseBackend(opts.Backend) // valid: checked above
	opts.Backend = want
	return &Registry{
		c: client, keys: keys, cfg: opts, clock: clock.From(ctx),
		be:       store{c: client, k: keys},
		own:      map[string]*owned{},
		reported: map[string]uint64{},
	}, want, nil
}

// use sets the backend of a registry that had not chosen one.
func (r *Registry) use(kind Backend) {
	r.kind, r.cfg.Backend, r.be.mode = kind, kind, string(kind)
	r.cfg.Logger.Info().Str("backend", string(kind)).Str("key", r.keys.Processes).Msg("process registry ready")
}

// newPending is the election's registry before the server has answered
// the backend probe (beat.Pending): its first registration goes in the
// script call that asks the probe (rdb.AskTaking), which writes it with
// modes' backend for the answer it gets, in the order of
// rdb.ProbeAnswers ("" for an answer on which the configured backend
// cannot run). The registry records that registration as any other, and
// takes no other write until resolve.
func newPending(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, opts Config) (r *Registry, modes [4]string, err error) {
	r, want, err := newUnchosen(ctx, client, keys, opts)
	if err != nil {
		return nil, modes, err
	}
	for i, a := range rdb.ProbeAnswers {
		if kind, err := pickBackend(Probed{Native: a.Native, HPExpire: a.HPExpire}, want); err == nil {
			modes[i] = string(kind)
		}
	}
	return r, modes, nil
}

// resolve chooses the backend of a pending registry on the probe's
// answer p, as newPending's modes did.
func (r *Registry) resolve(p Probed) error {
	kind, err := pickBackend(p, r.cfg.Backend)
	if err != nil {
		return err
	}
	r.use(kind)
	return nil
}

// keysFor checks that keys name every key the registry uses and returns
// them, with the Cluster hash tag when client is a *redis.ClusterClient.
func keysFor(client redis.UniversalClient, keys keyspace.Keys) (keyspace.Keys, error) {
	names := []string{keys.Processes, keys.ProcessesExpiry, keys.ProcessesVersion, keys.RegistryEvents,
		keys.MasterProcess, keys.Master, keys.Term}
	if slices.Contains(names, "") {
		return keys, fmt.Errorf("%w: keys are missing names; build them with keyspace.NewKeys", ErrInvalidConfig)
	}
	return clusterKeys(client, keys), nil
}

// clusterKeys returns keys with the Cluster hash tag, the same as the
// election's (which detects the client too), when client is a
// *redis.ClusterClient and keys, built from a lock name, lack it.
func clusterKeys(client redis.UniversalClient, keys keyspace.Keys) keyspace.Keys {
	if _, cluster := client.(*redis.ClusterClient); !cluster || keys.Cluster() || keys.LockName == "" {
		return keys
	}
	return keyspace.NewKeys(keys.LockName, true).WithSlavePrefix(keys.SlavePrefix)
}

// chooseBackend returns the backend to use (pickBackend) on the server
// behind client, asked with the probe unless probed has its answer.
func chooseBackend(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, probed *Probed, want Backend) (Backend, error) {
	p, err := probe(ctx, client, keys, probed)
	if err != nil {
		return "", err
	}
	return pickBackend(p, want)
}

// probe returns *probed, or when probed is nil the answer of the server
// behind client to the backend probe (rdb.RegistryProbe).
func probe(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, probed *Probed) (Probed, error) {
	if probed != nil {
		return *probed, nil
	}
	native, hpexpire, err := rdb.RegistryProbe(ctx, client, keys)
	if err != nil {
		return Probed{}, fmt.Errorf("probe the server for hash-field expiration: %w", err)
	}
	return Probed{Native: native, HPExpire: hpexpire}, nil
}

// Backend returns the backend in use; never BackendAuto.
func (r *Registry) Backend() Backend { return r.kind }

// ProcessTTL returns the TTL given to every entry written.
func (r *Registry) ProcessTTL() time.Duration { return r.cfg.ProcessTTL }

// Register writes info as the entry of info.ProcessID with a fresh TTL and
// announces it on Keys.RegistryEvents, in one round trip; the specification's
// registerProcess. Call it again whenever the role or the info changes.
//
// LastSeen is set to the clock's time. RegisteredAt, when zero, keeps the
// value of an earlier registration of the same process through r, or is the
// clock's time. NodeID, when empty, is ProcessID. The info is remembered for
// Heartbeat. Errors wrap ErrInvalidProcess or ErrMetadataTooLarge when info
// cannot be stored.
//
// Role master is fenced like the lock: Redis stores it only while
// Keys.Master holds info.NodeID and Keys.Term holds info.Term, checked in the
// script that writes. Otherwise the process is not master, and its true
// role is slave: the entry is written, announced and remembered with role
// slave and no term, and Register returns an error wrapping ErrNotMaster
// that names the lock's holder and term.
func (r *Registry) Register(ctx context.Context, info ProcessInfo) error {
	return r.registerWith(ctx, info, nil)
}

// registerWith is Register with the write sent by send (nil: by the
// registry itself, as Register does) with the election's acquire of the
// lock: info has role master and no term, and the entry is kept with the
// term send returns (beat.RegisterWith).
func (r *Registry) registerWith(ctx context.Context, info ProcessInfo, send beat.TermSender) error {
	if err := info.Validate(); err != nil {
		return err
	}
	info.NodeID = cmp.Or(info.NodeID, info.ProcessID)
	info.Metadata = copyMetadata(info.Metadata)
	info.Version = 0 // minted by the script

	o := r.lockOwned(info.ProcessID)
	defer o.mu.Unlock()
	now := r.clock.Now()
	if info.RegisteredAt.IsZero() {
		info.RegisteredAt = o.registeredAt(now)
	}
	info.LastSeen = now
	var via beat.Sender
	if send != nil {
		via = func(ctx context.Context, p rdb.Put) (rdb.Stored, error) {
			st, term, err := send(ctx, p)
			info.Term = term
			return st, err
		}
	}
	st, err := r.write(ctx, info, false, o.written.of(info), via)
	if err != nil {
		return fmt.Errorf("register process %q: %w", info.ProcessID, err)
	}
	return r.record("register", o, info, st)
}

// registeredAt is the time of the first registration of o's process: that
// of an earlier registration through the registry, else now.
func (o *owned) registeredAt(now time.Time) time.Time {
	if o.registered && !o.info.RegisteredAt.IsZero() {
		return o.info.RegisteredAt
	}
	return now
}

// record keeps in o, the record of info's process, what the write of info
// (a registration or a heartbeat, op) stored, as st says, and returns the
// error of a write refused or fenced: refused (another incarnation's live
// entry), nothing was stored, and o keeps only info's incarnation, so that
// Unregister leaves the other's entry alone; fenced, info was stored with
// role slave.
func (r *Registry) record(op string, o *owned, info ProcessInfo, st rdb.Stored) error {
	if st.InUse != nil {
		o.info.Incarnation = info.Incarnation
		o.written = lastWrite{} // the entry is another incarnation's
		return inUse(info.ProcessID, st.InUse)
	}
	o.info, o.registered = info, true
	o.written = lastWrite{version: st.Version, incarnation: info.Incarnation}
	if st.Fenced {
		o.info = asSlave(o.info) // what the write stored instead
		return r.fenced(op, info, st)
	}
	return nil
}

// fenced is the error of a master write of info that Redis refused.
func (r *Registry) fenced(op string, info ProcessInfo, st rdb.Stored) error {
	holder := "nobody holds the lock"
	if st.Holder != "" {
		holder = fmt.Sprintf("the lock is held by %q", wire.Truncate(st.Holder))
	}
	term := "no term"
	if st.HolderTerm != "" {
		term = "term " + wire.Truncate(st.HolderTerm)
	}
	err := fmt.Errorf("%s process %q as master of term %d: %s under %s; the entry was written with role slave: %w",
		op, info.ProcessID, info.Term, holder, term, keyspace.ErrFenced)
	r.cfg.Logger.Warn().Err(err).Msg("master registry write refused")
	return err
}

// Heartbeat renews the entry of processID: a new lastSeen and a fresh TTL,
// atomically, in one round trip; the specification's updateProcessHeartbeat.
// When the entry is gone (it expired, the master removed it as stale, or
// Redis lost its data) Heartbeat writes it again from the last info given to
// Register and announces the registration, so the registry rebuilds itself
// from live heartbeats.
//
// The heartbeat of a master is fenced as Register's write is: when the
// process no longer holds the lock under its term, the entry is written and
// announced with role slave, later heartbeats keep that role, and Heartbeat
// returns an error wrapping ErrNotMaster.
//
// It returns ErrNotRegistered for a process that was not registered through
// r, or was unregistered since.
func (r *Registry) Heartbeat(ctx context.Context, processID string) error {
	return r.heartbeatWith(ctx, processID, nil)
}

func init() {
	beat.HeartbeatWith = func(ctx context.Context, reg any, processID string, send beat.Sender) error {
		return reg.(*Registry).heartbeatWith(ctx, processID, send)
	}
	beat.RegisterWith = func(ctx context.Context, reg any, info any, send beat.TermSender) error {
		return reg.(*Registry).registerWith(ctx, info.(ProcessInfo), send)
	}
	beat.Pending = func(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, cfg any) (any, [4]string, error) {
		return newPending(ctx, client, keys, cfg.(Config))
	}
	beat.Resolve = func(reg any, native, hpexpire bool) error {
		return reg.(*Registry).resolve(Probed{Native: native, HPExpire: hpexpire})
	}
	beat.Recorded = func(reg any, processID string) (string, int64, bool) {
		o := reg.(*Registry).lockRegistered(processID)
		if o == nil {
			return "", 0, false
		}
		defer o.mu.Unlock()
		return string(o.info.Role), o.info.Term, true
	}
}

// heartbeatWith is Heartbeat with the write sent by send (nil: by the
// registry itself, as Heartbeat does), so that the election can send the
// heartbeat in the same round trip and script call as its own work: its
// slaves send it with their periodic look at the lock (beat.HeartbeatWith).
// send is not called, and ErrNotRegistered returned, when processID is not
// registered; it is called at most once, while the registry holds the
// process's record (a Register or Unregister of it waits).
func (r *Registry) heartbeatWith(ctx context.Context, processID string, send beat.Sender) error {
	o := r.lockRegistered(processID)
	if o == nil {
		return fmt.Errorf("heartbeat %q: %w", processID, ErrNotRegistered)
	}
	defer o.mu.Unlock()
	info := o.info
	info.LastSeen = r.clock.Now()
	st, err := r.write(ctx, info, true, o.written.of(info), send)
	if err != nil {
		return fmt.Errorf("heartbeat %q: %w", processID, err)
	}
	if st.Created { // never with InUse: a refused write stores nothing
		r.cfg.Logger.Info().Str("process", processID).Msg("entry was gone; heartbeat registered it again")
	}
	return r.record("heartbeat", o, info, st)
}

// lockRegistered returns the owned record of id, locked, when id is
// registered through r; nil when it is not, or was unregistered since.
func (r *Registry) lockRegistered(id string) *owned {
	r.mu.Lock()
	o := r.own[id]
	r.mu.Unlock()
	if o == nil {
		return nil
	}
	o.mu.Lock()
	if o.gone || !o.registered {
		o.mu.Unlock()
		return nil
	}
	return o
}

// Unregister deletes the entry of processID and, when there was a live one,
// announces it on Keys.RegistryEvents. An entry that another incarnation
// wrote (ProcessInfo.Incarnation differs from the one last registered
// through r) is left alone: it is a later process's under the same id. Heartbeat then refuses processID until it is
// registered again. Unregistering an absent process is not an error.
func (r *Registry) Unregister(ctx context.Context, processID string) error {
	if err := keyspace.ValidateName("process id", processID); err != nil {
		return fmt.Errorf("unregister: %w: %w", ErrInvalidProcess, err)
	}
	r.mu.Lock()
	o := r.own[processID]
	delete(r.own, processID)
	r.mu.Unlock()
	incarnation := ""
	if o != nil {
		// Wait for a write in flight, and stop later heartbeats of o.
		o.mu.Lock()
		o.gone = true
		incarnation = o.info.Incarnation
		defer o.mu.Unlock()
	}
	if _, err := r.be.removeOwn(ctx, processID, incarnation); err != nil {
		return fmt.Errorf("unregister %q: %w", processID, err)
	}
	return nil
}

// removeStale deletes the entry of id if it still holds raw, the value it
// was read with, and returns the version of the deletion (0: not deleted).
func (r *Registry) removeStale(ctx context.Context, id, raw string) (int64, error) {
	v, err := r.be.remove(ctx, id, &raw, keyspace.ReasonStale)
	if err != nil {
		return 0, fmt.Errorf("remove stale process %q: %w", id, err)
	}
	return v, nil
}

// write stores info, encoded whole; with role master it also sends the
// slave form of info, which Redis stores instead when the write is fenced.
// last is the version of the process's last write (rdb.Put.Last). send,
// when not nil, sends the write (HeartbeatWith).
func (r *Registry) write(ctx context.Context, info ProcessInfo, heartbeat bool, last int64, send beat.Sender) (rdb.Stored, error) {
	b, err := encodeEntry(info)
	if err != nil {
		return rdb.Stored{}, err
	}
	var fallback []byte
	if info.Role == RoleMaster {
		if fallback, err = encodeEntry(asSlave(info)); err != nil {
			return rdb.Stored{}, err
		}
	}
	return r.be.put(ctx, rdb.Put{
		ID: info.ProcessID, Value: b, Role: string(info.Role),
		TTL: r.cfg.ProcessTTL, Heartbeat: heartbeat,
		Node: info.NodeID, Term: info.Term, Fallback: fallback,
		Incarnation: info.Incarnation, Quiet: r.cfg.Quiet, Last: last,
	}, send)
}

// inUse is the error of a write that u refused.
func inUse(id string, u *rdb.InUse) error {
	return &InUseError{ProcessID: id, Incarnation: u.Incarnation, Identifier: wire.Truncate(u.Identifier), Age: u.Age}
}

// lockOwned returns the owned record of id, locked, claiming a new one
// while Unregister lets go of the one it finds.
func (r *Registry) lockOwned(id string) *owned {
	for {
		o := r.claim(id)
		o.mu.Lock()
		if !o.gone {
			return o
		}
		o.mu.Unlock() // unregistered meanwhile: claim a new record
	}
}

// claim returns the owned record of id, creating it when needed.
func (r *Registry) claim(id string) *owned {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.own[id]
	if o == nil {
		o = &owned{}
		r.own[id] = o
	}
	return o
}
