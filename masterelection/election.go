package masterelection

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/atomicmax"
	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// MasterElection takes part in one election: it contends for the master lock
// (when a candidate), renews it while master, watches it while slave, and
// reports every change as an event. Create it with New, then Start it; all
// methods are safe for concurrent use.
type MasterElection struct {
	client redis.UniversalClient
	cfg    Config
	keys   scripts.Keys
	clock  clock.Clock
	base   time.Time // origin of the monotonic deadlines kept in mastership
	log    zerolog.Logger
	bus    *bus

	incarnation string // names this run of the process in its registry entry (Incarnation)

	mastership   atomic.Pointer[mastership] // the current mastership; nil while slave
	observedTerm atomic.Int64               // highest term seen on this lock name
	candidate    atomic.Bool
	// awaitingID: Start found this node id's registry entry written lately
	// by another incarnation, so the process does not contend before its
	// first registration makes the id its own (twins.go).
	awaitingID atomic.Bool

	notices     chan notice          // lock notices from the events channel, read by run
	transfers   chan transferRequest // Transfer and control-channel requests, read by run
	candidacy   chan struct{}        // signals run that Candidate changed
	roles       chan roleChange      // the latest role, for the membership loop
	infoChanged chan struct{}        // metadata changed: the membership loop registers again

	reg     *registry.Registry // set by Start before run; nil in standalone mode (read under mu)
	beats   slaveBeats         // a slave's heartbeat riding its checks (membership.go)
	trackMu sync.Mutex         // orders slave events before master-lost
	bg      sync.WaitGroup     // membership and slave tracking goroutines

	mu       sync.Mutex
	metadata map[string]any
	state    lifecycle
	cancel   context.CancelFunc // ends run; set by Start
	stops    chan *stopRequest  // Stop's request that run resign first (stop.go); made by Start
	resolved chan struct{}      // closed when the first election has resolved
	// registered is closed by the membership loop at the first
	// registration: this process holds its node id in the registry.
	registered chan struct{}
	aside      error         // set once when the process stepped aside for a twin (twins.go)
	done       chan struct{} // closed when run has returned (or will never run)
	doneOnce   sync.Once
	stopped    chan struct{} // closed when Stop has finished
	stopErr    error         // Stop's result; written before stopped closes
	lastErr    error         // the latest error event, for Start's error
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
	m := &MasterElection{
		client:      client,
		cfg:         cfg,
		keys:        scripts.NewKeys(cfg.LockName, cluster).WithSlavePrefix(cfg.SlavePrefix),
		clock:       clk,
		base:        clk.Now(),
		log:         cfg.logger().With().Str("lock", cfg.LockName).Str("node", cfg.NodeID).Logger(),
		notices:     make(chan notice, 64),
		transfers:   make(chan transferRequest, 1),
		candidacy:   make(chan struct{}, 1),
		roles:       make(chan roleChange, 1),
		infoChanged: make(chan struct{}, 1),
		resolved:    make(chan struct{}),
		registered:  make(chan struct{}),
		incarnation: newIncarnation(),
		done:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	m.candidate.Store(!cfg.NonCandidate)
	m.bus = newBus(m.handlerPanicked)
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
	l := m.mastership.Load()
	if l == nil || !m.holds(l, m.clock.Now()) {
		return 0
	}
	return l.term
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
func (m *MasterElection) Keys() scripts.Keys { return m.keys }

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
	st, err := scripts.Check(ctx, m.client, m.keys)
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
	m.mu.Lock()
	m.metadata = maps.Clone(md)
	m.mu.Unlock()
	select {
	case m.infoChanged <- struct{}{}:
	default: // a refresh is already pending
	}
	return nil
}

// Metadata returns a copy of this process's metadata.
func (m *MasterElection) Metadata() map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.metadata)
}

// processInfo is this process's registry entry as of now.
func (m *MasterElection) processInfo(role registry.Role) registry.ProcessInfo {
	now := m.clock.Now()
	return registry.ProcessInfo{
		ProcessID:    m.cfg.NodeID,
		NodeID:       m.cfg.NodeID,
		Role:         role,
		LastSeen:     now,
		Capabilities: m.cfg.Capabilities,
		Identifier:   m.cfg.Identifier,
		RegisteredAt: m.base,
		Metadata:     m.Metadata(),
		NonCandidate: !m.candidate.Load(),
		Incarnation:  m.incarnation,
		Priority:     m.cfg.Priority,
	}
}

// masterInfoJSON is the master_process value given to the acquire script.
func (m *MasterElection) masterInfoJSON() ([]byte, error) {
	b, err := json.Marshal(m.processInfo(registry.RoleMaster))
	if err != nil {
		return nil, fmt.Errorf("encode master process info: %w", err)
	}
	return b, nil
}

// opTimeout bounds one Redis call of the loops.
func (m *MasterElection) opTimeout() time.Duration { return m.cfg.HeartbeatInterval }

// startTimeout bounds one Redis call of Start and of the calls that follow
// it until the first election resolved: the first pipeline, the notice
// feed's subscription, the registry's opening, the first check or acquire
// and the first registration. A start is not a heartbeat: a fleet starting at once
// queues at Redis (and at its listen backlog) for longer than a
// HeartbeatInterval, and a call cut off there is only sent again.
func (m *MasterElection) startTimeout() time.Duration { return m.cfg.LockTTL }

func (m *MasterElection) noteTerm(t int64) { atomicmax.Raise(&m.observedTerm, t) }
