package masterelection

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/herdkit/herd/registry"
)

// A twin is a second process running under a NodeID that a live process
// already uses: a pod left running on a partitioned node while its
// replacement starts under the same name, say. Each MasterElection draws
// an incarnation at New and writes it in its registry entry; the registry
// refuses to replace a live entry of another incarnation written less than
// Quiet (SlaveTimeout) ago (registry.ErrInUse). A process that stopped
// writing (it crashed) is told from a live one by that silence:
//
//   - A process whose first registration is refused waits until the entry
//     it saw would have gone Quiet without a write, then registers again.
//     Refused again, the entry was written meanwhile: its process is alive,
//     and this one is the twin. Otherwise it was a crashed predecessor, and
//     the id is now this process's.
//   - A process whose later write is refused was silent for Quiet while
//     another process took the id: it is the one left over.
//
// Either way the process steps aside: it reports ErrDuplicateNodeID, stops
// its election (releasing a lock it holds, pinned to its own term, and
// leaving the entry to the other), and its Worker gives its items up
// (assign). Start returns the error when it comes before Start returned.
// A process that Start found with its id's entry written lately by another
// incarnation does not contend for the lock before its first registration
// succeeds, so a twin never becomes master on the way.

// newIncarnation returns a random name for one run of a process.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return hex.EncodeToString(b[:])
}

// Incarnation returns the name of this run of the process, drawn at New and
// written in its registry entry (registry.ProcessInfo.Incarnation): two
// processes with one NodeID differ in it. Package assign writes it in the
// items' ownership, so a process never takes over items that another
// process under its NodeID still owns.
func (m *MasterElection) Incarnation() string { return m.incarnation }

// quiet is how long a live process may go without writing its registry
// entry: SlaveTimeout, after which the master counts it gone too.
func (m *MasterElection) quiet() time.Duration { return m.cfg.SlaveTimeout }

// contends reports whether the loop may contend for the lock now: the
// process is a candidate and does not wait for its node id (awaitingID).
func (m *MasterElection) contends() bool { return m.candidate.Load() && !m.awaitingID.Load() }

// SteppedAside returns the error, wrapping ErrDuplicateNodeID, with which
// this process stepped aside because another live process runs under its
// NodeID, or nil. Once it is set the election is stopping or stopped, and
// package assign's Worker gives its items up and claims none.
func (m *MasterElection) SteppedAside() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.aside
}

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
	case <-m.registered:
		return m.SteppedAside() == nil
	default:
		return false
	}
}

// suspectTwin tells, from the own entry that Start read (raw, at the
// server's time now), whether another incarnation wrote it less than Quiet
// ago: then the process waits for its first registration before it
// contends.
func (m *MasterElection) suspectTwin(raw string, now time.Time) bool {
	if raw == "" {
		return false
	}
	var e struct {
		Incarnation string `json:"incarnation"`
		Version     int64  `json:"version"`
	}
	if json.Unmarshal([]byte(raw), &e) != nil || e.Incarnation == "" || e.Incarnation == m.incarnation {
		return false
	}
	return now.Sub(time.UnixMicro(e.Version)) < m.quiet()
}

// quietWait is the membership loop's wait for an entry of another
// incarnation to go quiet: until is when the entry first refused would have
// gone Quiet without a write (zero before any refusal).
type quietWait struct{ until time.Time }

// inUse decides on a registration or heartbeat refused because another
// incarnation holds the entry: how long to wait before registering again,
// or twin true when this process must step aside. registered tells whether
// an earlier registration of this process succeeded.
func (m *MasterElection) inUse(q *quietWait, registered bool, e *registry.InUseError) (wait time.Duration, twin bool) {
	now := m.clock.Now()
	switch {
	case registered:
		return 0, true // another process took the id while this one was silent
	case !q.until.IsZero() && !now.Before(q.until):
		return 0, true // the entry was written again while this one waited: alive
	case q.until.IsZero():
		q.until = now.Add(m.quiet() - e.Age)
		m.log.Info().Str("incarnation", e.Incarnation).Dur("age", e.Age).Dur("wait", q.until.Sub(now)).
			Msg("registry entry of this node id written lately by another process; waiting to see whether it lives")
	}
	// A little past the instant, so that the entry's age has surely passed
	// Quiet on the server's clock too.
	return q.until.Sub(now) + max(m.quiet()/20, time.Millisecond), false
}

// stepAside stops this process for a twin: it reports the error wrapping
// ErrDuplicateNodeID once, and stops the election on a goroutine of its own
// (Stop waits for the loops that call stepAside).
func (m *MasterElection) stepAside(cause error) {
	err := fmt.Errorf("%w: %q: %w; this process steps aside: its election stops, it works no item and gives its items up; "+
		"give every process its own NodeID, or stop the other process first", ErrDuplicateNodeID, m.cfg.NodeID, cause)
	m.mu.Lock()
	if m.aside != nil {
		m.mu.Unlock()
		return
	}
	m.aside = err
	m.mu.Unlock()
	m.log.Error().Err(err).Msg("stepping aside")
	m.emitError(err)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.LockTTL)
		defer cancel()
		_ = m.Stop(ctx)
	}()
}

// stepAsideIfTwin steps aside when err is a refusal of a write by a
// registered process (registry.ErrInUse), and reports whether it did.
func (m *MasterElection) stepAsideIfTwin(err error) bool {
	var e *registry.InUseError
	if !errors.As(err, &e) {
		return false
	}
	m.stepAside(e)
	return true
}
