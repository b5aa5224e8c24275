package masterelection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/beat"
	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

// Start begins taking part in the election. It returns once the first
// election has resolved: this process is master (master-acquired and
// election-completed(true) were emitted) or slave (election-completed(false)),
// and its first registration made its NodeID its own. Under the NodeID of
// another live process (a twin) it fails with an error wrapping
// ErrDuplicateNodeID that names the id; after a crash of the process that
// had the NodeID it waits until that process's entry has gone SlaveTimeout
// without a write (docs/safety.md, "Twins and restarts").
// While Redis is unreachable or refuses the election's commands it keeps
// trying until ctx ends; it then stops the election and returns an error
// that wraps ctx's error and names the last error the attempts ran into
// (also reported as error events). The election keeps running after Start
// returns, until Stop; ctx bounds only the wait. When the lock key holds
// something other than a string (another program's data), no process could
// ever become master: Start stops and returns an error wrapping ErrGarbage
// that names the key and its type; so it does, naming the value and the DEL
// to run, when the term key holds something other than a term below
// keyspace.MaxTerm. When Redis refuses the user (a wrong password, an ACL
// without PUBLISH, SUBSCRIBE or another command the election runs), Start
// stops at once and returns an error wrapping ErrPermission that gives the
// cause Redis gave; it has written nothing.
func (m *MasterElection) Start(ctx context.Context) error {
	runCtx, err := m.begin(ctx)
	if err != nil {
		return err
	}
	var feed *noticeFeed // the notice feed, handed to run
	var look *lockLook   // Start's look at the lock, handed to run
	var took *firstTake  // Start's first attempt at the lock, handed to run
	if !m.cfg.Standalone {
		if feed, look, took, err = m.prepare(ctx, runCtx); err != nil {
			m.core.closeDone()
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.HeartbeatInterval)
			defer cancel()
			_ = m.Stop(stopCtx)
			return fmt.Errorf("masterelection: start: %w", err)
		}
	}
	m.members.stop = m.Stop // a process that steps aside for a twin stops
	go m.core.run(runCtx, feed, look, took)
	return m.awaitStarted(ctx, feed)
}

// begin moves a new election to started and returns the ctx of its loops,
// which Stop ends; a started or stopped one is refused.
func (m *MasterElection) begin(ctx context.Context) (context.Context, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.state {
	case stateStarted:
		return nil, ErrAlreadyStarted
	case stateStopping:
		return nil, ErrStopped
	}
	m.state = stateStarted
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	return runCtx, nil
}

// awaitStarted is Start's wait, once the loops run: for the first
// election to resolve, for the first registration, and for the notice
// feed.
func (m *MasterElection) awaitStarted(ctx context.Context, feed *noticeFeed) error {
	if err := m.awaitStartStep(ctx, m.core.resolved, "first election did not resolve"); err != nil {
		return err
	}
	if !m.cfg.Standalone {
		// The first registration: the node id is this process's, or a
		// twin's, and then this process steps aside (twins.go).
		if err := m.awaitStartStep(ctx, m.members.registered, "first registration did not succeed"); err != nil {
			return err
		}
	}
	if feed != nil && !m.IsMaster() {
		// A slave's feed is in place before Start returns, or failed and
		// reported: a release announced after Start returned is never
		// missed. A master hears no release while it holds the lock, so
		// its Start does not wait for the subscription's handshake (a
		// dial and three round trips on a connection of its own); should
		// the mastership end before the feed is in place, the loop looks
		// at the lock once it is (follower.feedConfirmed).
		select {
		case <-feed.ready:
		case <-ctx.Done():
		}
	}
	return nil
}

// awaitStartStep waits for step, a channel closed when a step of the
// start is done; what names the step in Start's error when ctx ends first.
func (m *MasterElection) awaitStartStep(ctx context.Context, step <-chan struct{}, what string) error {
	select {
	case <-step:
		return nil
	case <-m.core.done:
		return m.stoppedWhileStarting()
	case <-ctx.Done():
		return m.startCut(ctx, what)
	}
}

// stoppedWhileStarting is Start's error when the election stopped before
// Start returned: it stepped aside for a twin, or Stop was called.
func (m *MasterElection) stoppedWhileStarting() error {
	if err := m.SteppedAside(); err != nil {
		return fmt.Errorf("masterelection: start: %w", err)
	}
	return ErrStopped
}

// startCut stops the election when Start's ctx ended while it waited for
// what is named, and returns Start's error.
func (m *MasterElection) startCut(ctx context.Context, what string) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.HeartbeatInterval)
	defer cancel()
	_ = m.Stop(stopCtx)
	if err := m.lastError(); err != nil {
		// The cause is what the attempts ran into (a refusal by the ACL,
		// a wrong password, …), not the deadline itself.
		return m.withDialCause(ctx, fmt.Errorf("masterelection: start: %s: %w (last error: %w)", what, ctx.Err(), err), err)
	}
	return m.withDialCause(ctx, fmt.Errorf("masterelection: start: %s: %w", what, ctx.Err()), nil)
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
	case <-m.core.resolved:
		return m.IsMaster(), nil
	case <-m.core.done:
		return false, ErrStopped
	case <-ctx.Done():
		return false, fmt.Errorf("masterelection: wait for election: %w", ctx.Err())
	}
}

// prepare does what Start needs before the election loop runs: it opens
// the process registry (membership and slave tracking need it from the
// first election on), reads the eviction policy and refuses a lock key that
// holds garbage, and it opens the notice feed (openFeed). The questions
// these put to Redis (the registry's backend probe, INFO memory, the lock
// check) go out as one script call, one round trip on one connection (ask),
// with the first attempt at the lock when their answers allow it
// (askTaking); the feed's subscription, which dials a connection of its
// own, goes on meanwhile, and while the loop takes that attempt's outcome
// or makes its first attempt: the acquire, or, when the lock check found
// the lock held by another node, nothing (that answer is the first check:
// takeFirstLook). followLoop checks the lock
// again if that answer came before the feed was in place, and Start
// returns as slave only once it is. A slave's Start thus waits for the
// slower of the two, not for their sum; a master's only for its acquire
// (docs/performance.md, row 3s).
// What Redis did not answer at first (it was unreachable, and the registry
// kept probing until it answered) is asked again once the registry is
// open, so a Redis that comes up late gets the same checks as one that was
// there all along.
// runCtx ends when Stop is called.
//
// The feed is returned for run, and with it the look at the lock that
// Start's first round trip took (nil when it was not answered) and the
// outcome of the attempt at the lock it made (nil when none took the lock
// or lost its reply); on an error Start fails, and every goroutine prepare
// started has returned.
func (m *MasterElection) prepare(ctx, runCtx context.Context) (*noticeFeed, *lockLook, *firstTake, error) {
	openCtx, stopOpen := context.WithCancel(ctx)
	defer stopOpen()
	defer context.AfterFunc(runCtx, stopOpen)() // Stop while Start waits

	opened := make(chan struct{}) // the registry is open: Redis answers
	feed := m.core.openFeed(runCtx, opened)
	first := m.ask(openCtx)
	fail := func(err error) (*noticeFeed, *lockLook, *firstTake, error) {
		feed.close()
		m.undoTake(ctx, first.took)
		return nil, nil, nil, err
	}
	if first.refused != nil { // no election can work as this user; nothing was written
		feed.close()
		return nil, nil, nil, first.refused
	}
	reg, err := m.members.openFirst(openCtx, first)
	if err != nil {
		return fail(err)
	}
	close(opened)
	m.setRegistry(reg)

	if garbage := m.diagnose(openCtx, first); garbage != nil { // no election can work on this lock
		return fail(garbage)
	}
	return feed, first.look, first.took, nil
}

// undoTake undoes what Start's first attempt at the lock (askTaking) may
// have written when Start fails after it: the registration, when the entry
// still carries this process's incarnation, and the lock, released pinned
// to its term when that is known; a lock taken by an attempt whose reply
// was lost is left to expire (its term is unknown: a twin may hold the
// lock under this node id). Best effort: Start fails anyway.
func (m *MasterElection) undoTake(ctx context.Context, took *firstTake) {
	var dial *net.OpError
	if took == nil || errors.As(took.err, &dial) && dial.Op == "dial" { // nothing reached Redis
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opTimeout())
	defer cancel()
	if !took.lost {
		if _, err := rdb.Release(rctx, m.client, m.keys, m.cfg.NodeID, took.term); err != nil {
			m.log.Debug().Err(err).Int64("term", took.term).Msg("could not release the lock Start took before it failed")
		}
	}
	if _, err := rdb.RegistryRemoveOwn(rctx, m.client, m.keys, m.cfg.NodeID, m.incarnation); err != nil {
		m.log.Debug().Err(err).Msg("could not remove the registration Start may have written before it failed")
	}
}

// diagnose reports, as error events, what the server's settings put at
// risk (its eviction policy, Cluster's full coverage), reading again what
// Start's first round trip could not, and returns the lock check's verdict:
// an error wrapping ErrGarbage when the lock keys hold another program's
// data.
func (m *MasterElection) diagnose(ctx context.Context, first answers) error {
	eviction := first.eviction
	if eviction.err != nil && !eviction.refused() {
		eviction = m.readEviction(ctx)
	}
	m.reportEviction(eviction)
	m.reportCoverage(m.readFullCoverage(ctx))
	if first.checked {
		return first.garbage
	}
	garbage, _ := m.foreignLock(ctx)
	return garbage
}

// answers is what Start's first round trip (ask) found.
type answers struct {
	probed   *registry.Probed // the registry's backend probe; nil when it failed
	probeErr error            // why it failed
	eviction evictionRead
	garbage  error     // the lock check's verdict (foreignLock), when checked
	checked  bool      // the lock check was answered
	refused  error     // the user cannot work at all (refusal), wrapping ErrPermission
	look     *lockLook // the lock check's answer; nil when it was not answered
	// pending is the registry the questions went through with Start's
	// first attempt at the lock (askTaking), nil when they went alone;
	// took is that attempt's outcome when it took the lock or its reply
	// was lost, nil otherwise.
	pending any
	took    *firstTake
}

// refusal returns an error wrapping ErrPermission when Redis refused the
// user (a wrong password: the call's error pipeErr) or the user's ACL
// refuses commands the election runs (access's answer), naming what Redis
// said; nil otherwise, also when the access check could not run for another
// reason (Redis unreachable: Start's other questions report that).
func (m *MasterElection) refusal(pipeErr error, access *rdb.AccessCall) error {
	// Only a refused connection counts here: a command herd can do
	// without (INFO, for the eviction check) may fail on its own.
	if pipeErr != nil && (strings.Contains(pipeErr.Error(), "WRONGPASS") || strings.Contains(pipeErr.Error(), "NOAUTH")) {
		return fmt.Errorf("%w: %w", ErrPermission, pipeErr)
	}
	if access == nil {
		return nil
	}
	refused, err := access.Result()
	switch {
	case rdb.IsRefusal(err):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case err != nil || len(refused) == 0:
		return nil
	}
	return fmt.Errorf("%w: the ACL of this Redis user refuses %s (NOPERM); the election needs them all, see docs/topologies.md",
		ErrPermission, strings.Join(refused, ", "))
}

// ask puts Start's questions to the server that holds the election's keys
// in one script call (rdb.Ask, or rdb.AskTaking with the first attempt at
// the lock: askTaking), one round trip on one connection of the client's
// main pool: which commands the user's ACL refuses, the registry's backend
// probe, INFO memory (the eviction check), the lock check and the
// process's own registry entry. Separate calls at once would each take a connection of their own
// from the pool, and open it (a dial, then HELLO and CLIENT SETINFO, a
// round trip each), on a client that holds a single idle connection, as a
// warm one does; a pipeline would open a connection in go-redis's pool for
// pipelines, which would then stay open, idle, for the client's life.
//
// A question whose answer is an error is asked again by prepare: the probe
// by New's own probe, the others once the registry is open.
func (m *MasterElection) ask(ctx context.Context) answers {
	limit := m.startTimeout()
	if m.takesAtStart() {
		limit = m.core.acquireLimit(&loopState{unresolved: true}) // the attempt's reply must come while its lock lasts
	}
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	srv, addr, err := serverOf(pctx, m.client, m.keys.Master)
	if err != nil {
		return answers{probeErr: err, eviction: evictionRead{err: err}, refused: m.refusal(err, nil)}
	}
	var a answers
	asked, took, pending := m.askTaking(pctx, srv)
	if pending == nil {
		asked = rdb.Ask(pctx, srv, m.keys, m.keys.Turn(m.cfg.NodeID), m.cfg.NodeID)
	}
	a.took, a.pending = took, pending
	if raw, now, err := asked.Own.Result(); err == nil && m.members.suspectTwin(raw, now) {
		m.awaitingID.Store(true) // twins.go
	}
	_, accessErr := asked.Access.Result() // a refused connection is every answer's error
	a.refused = m.refusal(accessErr, asked.Access)
	if native, hpexpire, err := asked.Probe.Result(); err != nil {
		a.probeErr = err
	} else {
		a.probed = &registry.Probed{Native: native, HPExpire: hpexpire}
	}
	a.eviction = memoryRead(addr, asked.Info)
	st, err := asked.Check.Result()
	a.garbage, a.checked = m.garbageIn(pctx, st, err)
	if err == nil {
		a.look = &lockLook{st: st, at: m.clock.Now()}
	}
	return a
}

// takesAtStart reports whether Start's questions go with its first attempt
// at the lock (askTaking): the process is a candidate, and no replica must
// acknowledge an acquire (AcquireReplicated waits for them in a call of
// its own).
func (m *MasterElection) takesAtStart() bool {
	return m.core.contends() && m.cfg.WaitReplicas <= 0
}

// askTaking asks Start's questions with its first attempt at the lock and
// its registration as master (rdb.AskTaking), through pending, a registry
// that has not probed the server yet (beat.Pending): the process becomes
// master and registered in Start's first round trip, as contend's
// acquireRegistering would in the next. pending is nil when the call was
// not sent (not takesAtStart, the registry's configuration or the entry
// refused before the call): Start asks the questions alone. The
// attempt's outcome is took, nil when the attempt did not take the lock:
// the run loop makes its first attempt as it would have (a lock held is
// the questions' look, takeFirstLook), after recording that the lock may
// be its own when the reply was lost (firstTake.lost).
func (m *MasterElection) askTaking(ctx context.Context, srv redis.Scripter) (asked rdb.Asked, took *firstTake, pending any) {
	if !m.takesAtStart() {
		return rdb.Asked{}, nil, nil
	}
	reg, modes, err := beat.Pending(clock.With(ctx, m.clock), m.client, m.keys, m.members.registryConfig())
	if err != nil {
		return rdb.Asked{}, nil, nil // openFirst reports it
	}
	c := m.core
	info, err := c.masterInfoJSON()
	if err != nil {
		c.emitError(err)
		info = nil
	}
	seen := c.observedTerm.Load()
	var (
		res  rdb.Took
		at   time.Time
		sent bool
	)
	c.members.acquireInfo.Store(c.members.infoGen.Load()) // before the info is read
	regErr := beat.RegisterWith(ctx, reg, c.processInfo(registry.RoleMaster), func(ctx context.Context, p rdb.Put) (rdb.Stored, int64, error) {
		take := rdb.Take{NodeID: m.cfg.NodeID, TTL: m.cfg.LockTTL, Info: info, Seen: seen, Put: p, Modes: modes}
		at = c.clock.Now()
		var err error
		if asked, res, err = rdb.AskTaking(ctx, srv, m.keys, m.keys.Turn(m.cfg.NodeID), m.cfg.NodeID, take); err != nil {
			return rdb.Stored{}, 0, err // nothing sent
		}
		sent = true
		switch {
		case res.Err != nil:
			return rdb.Stored{}, 0, res.Err
		case !res.Made || res.Acquired.Term == 0:
			return rdb.Stored{}, 0, errNotTaken
		}
		return res.Stored, res.Acquired.Term, res.RegErr
	})
	if !sent {
		return rdb.Asked{}, nil, nil
	}
	switch {
	case res.Err != nil: // the attempt may have been made, and have taken the lock
		if res.Made { // the questions were answered (a lost reply is reported with them)
			c.emitError(fmt.Errorf("acquire master lock: %w", res.Err))
		}
		took = &firstTake{sent: at, info: info, lost: true, err: res.Err}
	case res.Made && res.Acquired.Term > 0:
		if regErr != nil {
			c.log.Debug().Err(regErr).Int64("term", res.Acquired.Term).Msg("registration with Start's acquire failed: the membership loop registers")
		}
		took = &firstTake{sent: at, info: info, term: res.Acquired.Term, registered: regErr == nil}
	default:
		if st, err := asked.Check.Result(); err == nil && st.Exists && st.NodeID == m.cfg.NodeID {
			// Found under this node id: an earlier run of this very call,
			// whose reply was lost and which go-redis sent again
			// (MaxRetries), may have taken it (and registered, which is why
			// this run made no attempt); or a twin did.
			took = &firstTake{sent: at, info: info, lost: true}
		}
	}
	return asked, took, reg
}

// firstTake is the outcome of Start's first attempt at the lock, made
// with its questions (askTaking), for the run loop to take before it does
// anything else (takeFirst).
type firstTake struct {
	sent       time.Time // when the call was sent: the lease counts from then
	info       []byte    // the master info it carried
	term       int64     // the term it took the lock under; 0 when lost
	registered bool      // its registration as master was stored
	// lost: the lock may be this process's from the attempt, under a term
	// it did not learn (the reply was lost, or the lock is found under
	// this node id after a run whose reply was lost); err is the call's
	// error then, if any.
	lost bool
	err  error
}

// openFirst opens the registry with the backend probe's answer from ask.
// When the probe failed, or its answer does not do (a configured backend
// the server does not run), that is reported as openRegistry reports the
// errors of its attempts, and openRegistry takes over: it probes again at
// once, then after each backoff, until ctx ends.
func (mb *membership) openFirst(ctx context.Context, a answers) (*registry.Registry, error) {
	err := a.probeErr
	if a.pending != nil && a.probed != nil && beat.Resolve(a.pending, a.probed.Native, a.probed.HPExpire) == nil {
		return a.pending.(*registry.Registry), nil // with the registration the questions carried, if any
	}
	if a.probed != nil {
		var reg *registry.Registry
		reg, err = registry.NewProbed(clock.With(ctx, mb.clock), mb.client, mb.keys, mb.registryConfig(), *a.probed)
		if err == nil || errors.Is(err, registry.ErrInvalidConfig) {
			return reg, err
		}
	}
	if ctx.Err() != nil {
		return nil, mb.withDialCause(ctx, fmt.Errorf("open process registry: %w (last error: %w)", ctx.Err(), err), err)
	}
	mb.emitError(fmt.Errorf("open process registry: %w", err))
	return mb.openRegistry(ctx)
}
