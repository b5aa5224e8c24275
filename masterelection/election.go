package masterelection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

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
	base   time.Time // origin of the monotonic deadlines kept in leadership
	log    zerolog.Logger
	bus    *bus

	lead         atomic.Pointer[leadership] // the current mastership; nil while slave
	observedTerm atomic.Int64               // highest term seen on this lock name
	candidate    atomic.Bool

	notices     chan notice          // lock notices from the events channel, read by run
	transfers   chan transferRequest // Transfer and control-channel requests, read by run
	candidacy   chan struct{}        // signals run that Candidate changed
	roles       chan roleChange      // the latest role, for the membership loop
	infoChanged chan struct{}        // metadata changed: the membership loop registers again

	reg     *registry.Registry // set by Start before run; nil in standalone mode (read under mu)
	trackMu sync.Mutex         // orders slave events before master-lost
	bg      sync.WaitGroup     // membership and slave tracking goroutines

	mu       sync.Mutex
	metadata map[string]any
	state    lifecycle
	cancel   context.CancelFunc // ends run; set by Start
	stops    chan *stopRequest  // Stop's request that run resign first (stop.go); made by Start
	resolved chan struct{}      // closed when the first election has resolved
	done     chan struct{}      // closed when run has returned (or will never run)
	doneOnce sync.Once
	stopped  chan struct{} // closed when Stop has finished
	stopErr  error         // Stop's result; written before stopped closes
	lastErr  error         // the latest error event, for Start's error
}

type lifecycle int

const (
	stateNew lifecycle = iota
	stateStarted
	stateStopping
)

// leadership is one mastership: from a successful acquire until the lock is
// lost, the self-fencing deadline passes, or Stop releases it.
type leadership struct {
	term     int64
	ctx      *masterCtx     // given to OnMasterAcquired handlers; done when the mastership ends (masterctx.go)
	deadline atomic.Int64   // self-fencing deadline, nanoseconds after MasterElection.base
	handlers sync.WaitGroup // OnMasterAcquired handlers not yet returned
}

// newLeadership returns mastership term, whose self-fencing deadline is
// deadline (an offset from m.base) and whose ctx is also done when parent is.
func (m *MasterElection) newLeadership(parent context.Context, term int64, deadline time.Duration) *leadership {
	l := &leadership{term: term}
	l.deadline.Store(int64(deadline))
	m.newMasterCtx(parent, l)
	return l
}

// end marks mastership l over for its ctx (and every RunIfMaster ctx of
// it) at once; it never blocks.
func (l *leadership) end() { l.ctx.cancel() }

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

// Start begins taking part in the election. It returns once the first
// election has resolved: this process is master (master-acquired and
// election-completed(true) were emitted) or slave (election-completed(false)).
// While Redis is unreachable or refuses the election's commands it keeps
// trying until ctx ends; it then stops the election and returns an error
// that wraps ctx's error and names the last error the attempts ran into
// (also reported as error events). The election keeps running after Start
// returns, until Stop; ctx bounds only the wait. When the lock key holds
// something other than a string (another program's data), no process could
// ever become master: Start stops and returns an error wrapping ErrGarbage
// that names the key and its type; so it does, naming the value and the DEL
// to run, when the term key holds something other than a term below
// scripts.MaxTerm. When Redis refuses the user (a wrong password, an ACL
// without PUBLISH, SUBSCRIBE or another command the election runs), Start
// stops at once and returns an error wrapping ErrPermission that gives the
// cause Redis gave; it has written nothing.
func (m *MasterElection) Start(ctx context.Context) error {
	m.mu.Lock()
	switch m.state {
	case stateStarted:
		m.mu.Unlock()
		return ErrAlreadyStarted
	case stateStopping:
		m.mu.Unlock()
		return ErrStopped
	}
	m.state = stateStarted
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	m.stops = make(chan *stopRequest)
	m.mu.Unlock()

	var sub *subscription // the events subscription, handed to run
	if !m.cfg.Standalone {
		var err error
		if sub, err = m.prepare(ctx, runCtx); err != nil {
			m.closeDone()
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.HeartbeatInterval)
			defer cancel()
			_ = m.Stop(stopCtx)
			return fmt.Errorf("masterelection: start: %w", err)
		}
	}
	go m.run(runCtx, sub)

	select {
	case <-m.resolved:
		if sub != nil {
			// In place before Start returns, or failed and reported: a
			// release announced after Start returned is never missed.
			select {
			case <-sub.ready:
			case <-ctx.Done():
			}
		}
		return nil
	case <-m.done:
		return ErrStopped
	case <-ctx.Done():
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.HeartbeatInterval)
		defer cancel()
		_ = m.Stop(stopCtx)
		if err := m.lastError(); err != nil {
			// The cause is what the attempts ran into (a refusal by the ACL,
			// a wrong password, …), not the deadline itself.
			return m.withDialCause(ctx, fmt.Errorf("masterelection: start: first election did not resolve: %w (last error: %w)", ctx.Err(), err), err)
		}
		return m.withDialCause(ctx, fmt.Errorf("masterelection: start: first election did not resolve: %w", ctx.Err()), nil)
	}
}

// lastError returns the latest error reported by an error event, or nil.
func (m *MasterElection) lastError() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastErr
}

// Stop leaves the election. On the master it cancels the ctx given to the
// OnMasterAcquired handlers, waits for them to return, releases the lock
// (the release notice makes a slave take over at once) and emits
// master-lost. On every process it then stops the loops and waits for every
// goroutine, including event handlers finishing the events already queued.
// All waiting is bounded by ctx. Stop may be called more than once and from
// several goroutines; later calls wait for the first and return its result.
//
// When ctx ends before the OnMasterAcquired handlers have returned, Stop
// does not wait for them any longer: IsMaster turns false, the lock is
// released all the same (with a fresh ctx bounded by HeartbeatInterval, so
// that the others need not wait LockTTL), master-lost is emitted, and Stop
// returns an error wrapping ErrHandlersRunning and ctx's error that says the
// lock was released while a handler still ran. Another process may then be
// master while that handler still runs: a handler must return when its ctx
// is done, and write only with the term it was given (which fencing
// refuses once another process is master).
func (m *MasterElection) Stop(ctx context.Context) error {
	m.mu.Lock()
	if m.state == stateStopping {
		m.mu.Unlock()
		select {
		case <-m.stopped:
			return m.stopErr
		case <-ctx.Done():
			return fmt.Errorf("masterelection: stop: %w", ctx.Err())
		}
	}
	wasStarted := m.state == stateStarted
	m.state = stateStopping
	m.mu.Unlock()

	var errs []error
	if wasStarted {
		if m.lead.Load() != nil && !m.cfg.Standalone { // standalone: nothing to release
			errs = append(errs, m.resignFirst(ctx))
		}
		m.cancel()
		select {
		case <-m.done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("election loop still running: %w", ctx.Err()))
		}
		if l := m.lead.Load(); l != nil {
			_, err := m.resign(ctx, l, 0, "stopped", "", 0)
			errs = append(errs, err)
		}
		if reg := m.Registry(); reg != nil {
			rctx, cancel := m.cleanupContext(ctx)
			if err := reg.Unregister(rctx, m.cfg.NodeID); err != nil {
				errs = append(errs, fmt.Errorf("unregister process: %w", err))
			}
			cancel()
		}
	} else {
		m.closeDone()
	}
	errs = append(errs, m.bus.close(ctx))
	m.stopErr = errors.Join(errs...)
	if m.stopErr != nil {
		m.stopErr = fmt.Errorf("masterelection: stop: %w", m.stopErr)
	}
	close(m.stopped)
	return m.stopErr
}

func (m *MasterElection) closeDone() { m.doneOnce.Do(func() { close(m.done) }) }

// resign ends mastership l gracefully: it cancels the ctx of l's
// OnMasterAcquired handlers, waits for them to return (bounded by ctx and,
// when positive, by handlerWait), releases the lock (the release is
// announced, so a slave takes over at once; not in standalone mode) and
// emits master-lost. released tells whether the lock was released.
//
// A successor, when not "", gets the released lock reserved for window
// (see Transfer).
func (m *MasterElection) resign(ctx context.Context, l *leadership, handlerWait time.Duration, reason, successor string, window time.Duration) (released bool, err error) {
	l.end()
	var errs []error
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if handlerWait > 0 {
		wctx, cancel = context.WithTimeout(ctx, handlerWait)
	}
	handlersDone := make(chan struct{})
	go func() { l.handlers.Wait(); close(handlersDone) }()
	var running error // the handlers had not returned when the wait ended
	select {
	case <-handlersDone:
	case <-wctx.Done():
		running = wctx.Err()
	}
	cancel()
	// IsMaster turns false before the release: the release notice wakes
	// the slaves, and one of them may be master a round trip later.
	l.deadline.Store(0)
	if !m.cfg.Standalone {
		rctx, cancel := m.cleanupContext(ctx)
		released, err = scripts.ReleaseTo(rctx, m.client, m.keys, m.cfg.NodeID, l.term, successor, window)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("release master lock: %w", err))
		}
	}
	if running != nil {
		what := "the lock was released while an OnMasterAcquired handler still ran: another process may be master before it returns"
		if !released {
			what = "an OnMasterAcquired handler still ran when the wait for it ended"
		}
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrHandlersRunning, what, running))
	}
	m.endLeadership(l, reason)
	return released, errors.Join(errs...)
}

// cleanupContext returns ctx when it is still live, or a fresh context
// bounded by the operation timeout when ctx has already ended, so cleanup
// that matters to others (the release) still gets its chance.
func (m *MasterElection) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithTimeout(ctx, m.opTimeout())
	}
	return context.WithTimeout(context.WithoutCancel(ctx), min(m.opTimeout(), time.Second))
}

// WaitForElectionComplete waits until the first election has resolved and
// reports whether this process is master. It returns ctx's error when ctx
// ends first, ErrNotStarted before Start and ErrStopped after Stop.
func (m *MasterElection) WaitForElectionComplete(ctx context.Context) (isMaster bool, err error) {
	m.mu.Lock()
	state := m.state
	m.mu.Unlock()
	if state == stateNew {
		return false, ErrNotStarted
	}
	select {
	case <-m.resolved:
		return m.IsMaster(), nil
	case <-m.done:
		return false, ErrStopped
	case <-ctx.Done():
		return false, fmt.Errorf("masterelection: wait for election: %w", ctx.Err())
	}
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
	l := m.lead.Load()
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
	m.observeTerm(st.Term)
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

// holds reports whether mastership l is still certain at now.
func (m *MasterElection) holds(l *leadership, now time.Time) bool {
	at := now.Sub(m.base)
	for {
		cur := l.deadline.Load()
		if at < time.Duration(cur) {
			return true
		}
		// Passed: latch it, so that a renewal whose reply comes now cannot
		// move the deadline past this answer (see extend).
		if cur == 0 || l.deadline.CompareAndSwap(cur, 0) {
			return false
		}
	}
}

// opTimeout bounds one Redis call of the loops.
func (m *MasterElection) opTimeout() time.Duration { return m.cfg.HeartbeatInterval }

func (m *MasterElection) observeTerm(t int64) {
	for {
		cur := m.observedTerm.Load()
		if t <= cur || m.observedTerm.CompareAndSwap(cur, t) {
			return
		}
	}
}
