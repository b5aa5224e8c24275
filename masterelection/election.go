package masterelection

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// MasterElection takes part in one election: it contends for the master lock
// (when a candidate), renews it while master, watches it while slave, and
// reports every change as an event. Create it with New, then Start it; all
// methods are safe for concurrent use.
//
// It is the specification's facade over two parts that run beside each
// other: the election core (core.go), which owns the lock, the term,
// self-fencing and the notices, and membership (membership.go), which owns
// the registry entry, the slave tracker and the succession ranking and sees
// the core only through the view the core hands it.
type MasterElection struct {
	*node
	core    *core
	members *membership

	mu      sync.Mutex
	state   lifecycle
	cancel  context.CancelFunc // ends the loops; set by Start
	stopped chan struct{}      // closed when Stop has finished
	stopErr error              // Stop's result; written before stopped closes
}

type lifecycle int

const (
	stateNew lifecycle = iota
	stateStarted
	stateStopping
)

// New returns an election on client configured by cfg. It does not talk to
// Redis; Start does.
//
// client may be a *redis.Client, a Sentinel failover client or a
// *redis.ClusterClient (then every key shares the hash tag {LockName}). herd
// bounds every Redis call with a context deadline, which go-redis honours
// only when the client was made with ContextTimeoutEnabled: without it a call
// to an unreachable Redis blocks for the client's ReadTimeout, which can be
// longer than the self-fencing deadline allows. New logs a warning when it can
// see that the option is off.
func New(client redis.UniversalClient, cfg Config) (*MasterElection, error) {
	return newElection(client, cfg, clock.Real{})
}

func newElection(client redis.UniversalClient, cfg Config, clk clock.Clock) (*MasterElection, error) {
	if nilclient.Is(client) {
		// A typed nil (a nil *redis.Client in the interface) is no client
		// either: refused like nil, or dropped in standalone mode.
		if !cfg.Standalone {
			return nil, ErrNilClient
		}
		client = nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.NodeID == "" {
		cfg.NodeID = uuid.NewString()
	}
	_, cluster := client.(*redis.ClusterClient)
	n := &node{
		client:      client,
		cfg:         cfg,
		keys:        keyspace.NewKeys(cfg.LockName, cluster).WithSlavePrefix(cfg.SlavePrefix),
		clock:       clk,
		base:        clk.Now(),
		log:         cfg.logger().With().Str("lock", cfg.LockName).Str("node", cfg.NodeID).Logger(),
		incarnation: newIncarnation(),
	}
	n.candidate.Store(!cfg.NonCandidate)
	n.bus = newBus(n.handlerPanicked)
	m := &MasterElection{node: n, stopped: make(chan struct{})}
	m.core = newCore(n)
	m.members = newMembership(n, m.core.view())
	m.core.members = m.members
	if cfg.Standalone {
		m.log.Warn().Msg("standalone mode: always master, no coordination with any other process")
	}
	if !contextTimeoutEnabled(client) {
		m.log.Warn().Msg("redis client has ContextTimeoutEnabled off: a call to an unreachable Redis can outlast the self-fencing deadline")
	}
	return m, nil
}

// contextTimeoutEnabled reports whether client honours context deadlines,
// as far as can be seen: true when the client's type does not tell.
func contextTimeoutEnabled(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// IsMaster reports whether this process is master now. It answers from the
// self-fencing deadline on the local monotonic clock: once the time during
// which the lock is certainly still this process's has passed, it returns
// false, even if the election loop has not run since (after a long pause of
// the process, say) and even if Redis is unreachable.
func (m *MasterElection) IsMaster() bool { return m.Term() != 0 }

// Term returns the fencing term of the current mastership, or 0 when this
// process is not master (by the same rule as IsMaster). Stamp it on every
// write or message the master sends, so receivers can refuse those of a
// master that has been replaced: terms only grow.
func (m *MasterElection) Term() int64 {
	return m.core.term()
}

// ObservedTerm returns the highest term this process has seen on its lock
// name, as Redis showed it: its own, in a reply of the acquire or check
// script, or from Master. Notices on the events channel never raise it
// (anyone who may PUBLISH could send one); they only make the process ask
// Redis sooner. A message stamped with a lower term comes from a master that
// has been replaced.
func (m *MasterElection) ObservedTerm() int64 { return m.observedTerm.Load() }

// NodeID returns this process's node id.
func (m *MasterElection) NodeID() string { return m.cfg.NodeID }

// Identifier returns this process's human-readable name.
func (m *MasterElection) Identifier() string { return m.cfg.Identifier }

// LockName returns the election's lock name.
func (m *MasterElection) LockName() string { return m.cfg.LockName }

// LockTTL returns the election's LockTTL, its default filled in: the
// timing the defaults of package assign follow.
func (m *MasterElection) LockTTL() time.Duration { return m.cfg.LockTTL }

// SlaveTimeout returns the election's SlaveTimeout, its default filled in:
// how old a slave's last heartbeat gets before the master removes it.
func (m *MasterElection) SlaveTimeout() time.Duration { return m.cfg.SlaveTimeout }

// Keys returns the Redis names of the election.
func (m *MasterElection) Keys() keyspace.Keys { return m.keys }

// Master asks Redis who is master now and under which term. nodeID is ""
// when no process holds the lock. In standalone mode it answers without
// Redis: this process, while started. A lock key that holds something herd
// never writes is an error wrapping ErrGarbage that names the key (and its
// type, when it is not a string).
func (m *MasterElection) Master(ctx context.Context) (nodeID string, term int64, err error) {
	if m.cfg.Standalone {
		if t := m.Term(); t != 0 {
			return m.cfg.NodeID, t, nil
		}
		return "", 0, nil
	}
	st, err := rdb.Check(ctx, m.client, m.keys)
	if err != nil {
		return "", 0, fmt.Errorf("masterelection: check master: %w", err)
	}
	if st.Exists && st.NodeID == "" {
		return "", st.Term, m.lockHolds(ctx)
	}
	if st.Garbage != "" {
		return st.NodeID, st.Term, fmt.Errorf("%w: %s", ErrGarbage, st.Garbage)
	}
	m.noteTerm(st.Term)
	return st.NodeID, st.Term, nil
}

// SetMetadata replaces this process's metadata (a copy of md is kept). The
// registry entry is written again with it at once; master_process gets it
// at the next acquisition. Metadata the registry would refuse is refused
// here, and the metadata is left as it was: an error wrapping
// registry.ErrMetadataTooLarge when md encodes to more than
// registry.MaxMetadataBytes of JSON, registry.ErrInvalidProcess when it
// cannot be encoded as JSON.
func (m *MasterElection) SetMetadata(md map[string]any) error {
	info := registry.ProcessInfo{ProcessID: m.cfg.NodeID, Role: registry.RoleSlave, Metadata: md}
	if err := info.Validate(); err != nil {
		return fmt.Errorf("masterelection: set metadata: %w", err)
	}
	m.setMetadata(md)
	m.members.infoChangedNow()
	return nil
}

// Metadata returns a copy of this process's metadata.
func (m *MasterElection) Metadata() map[string]any { return m.metadataCopy() }

// RunIfMaster runs fn if this process is master, and reports whether it
// did. fn's ctx is done when ctx ends or the mastership ends, whichever
// comes first, and never later than IsMaster turns false (its Err reads the
// self-fencing deadline itself); term is the mastership's fencing term, to stamp on what fn
// writes. When this process is not master, fn is not called and RunIfMaster
// returns false and ErrNotMaster.
func (m *MasterElection) RunIfMaster(ctx context.Context, fn func(ctx context.Context, term int64) error) (ran bool, err error) {
	l := m.core.mastership.Load()
	if l == nil || !l.holds(m.clock.Now()) {
		return false, ErrNotMaster
	}
	fctx := newMasterCtx(ctx, l)
	defer fctx.cancel()
	if err := fn(fctx, l.term); err != nil {
		return true, fmt.Errorf("masterelection: run as master (term %d): %w", l.term, err)
	}
	return true, nil
}

// SteppedAside returns the error, wrapping ErrDuplicateNodeID, with which
// this process stepped aside because another live process runs under its
// NodeID, or nil. Once it is set the election is stopping or stopped, and
// package assign's Worker gives its items up and claims none.
func (m *MasterElection) SteppedAside() error {
	return m.members.steppedAside()
}

// Registry returns the process registry of the election, or nil before
// Start and in standalone mode.
func (m *MasterElection) Registry() *registry.Registry {
	return m.node.registry()
}

// Candidate reports whether this process contends for mastership.
func (m *MasterElection) Candidate() bool { return m.candidate.Load() }

// Incarnation returns the name of this run of the process, drawn at New and
// written in its registry entry (registry.ProcessInfo.Incarnation): two
// processes with one NodeID differ in it. Package assign writes it in the
// items' ownership, so a process never takes over items that another
// process under its NodeID still owns.
func (m *MasterElection) Incarnation() string { return m.incarnation }

// HoldsNodeID reports whether this process holds its NodeID: its first
// registration succeeded (Start waits for it) and it has not stepped aside
// for a twin. Work bound to the NodeID that does not go through the
// election (a durable Consumer, say) can wait for it. In standalone mode,
// which has no registry, it is always true.
func (m *MasterElection) HoldsNodeID() bool {
	if m.cfg.Standalone {
		return true
	}
	select {
	case <-m.members.registered:
		return m.SteppedAside() == nil
	default:
		return false
	}
}
