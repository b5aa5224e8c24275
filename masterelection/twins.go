package masterelection

import (
	"context"
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

// suspectTwin tells, from the own entry that Start read (raw, at the
// server's time now), whether another incarnation wrote it less than Quiet
// ago: then the process waits for its first registration before it
// contends.
func (mb *membership) suspectTwin(raw string, now time.Time) bool {
	if raw == "" {
		return false
	}
	var e struct {
		Incarnation string `json:"incarnation"`
		Version     int64  `json:"version"`
	}
	if json.Unmarshal([]byte(raw), &e) != nil || e.Incarnation == "" || e.Incarnation == mb.incarnation {
		return false
	}
	return now.Sub(time.UnixMicro(e.Version)) < mb.quiet()
}

// quietWait is the membership loop's wait for an entry of another
// incarnation to go quiet: until is when the entry first refused would have
// gone Quiet without a write (zero before any refusal).
type quietWait struct{ until time.Time }

// inUse decides on a registration or heartbeat refused because another
// incarnation holds the entry: how long to wait before registering again,
// or twin true when this process must step aside. registered tells whether
// an earlier registration of this process succeeded.
func (mb *membership) inUse(q *quietWait, registered bool, e *registry.InUseError) (wait time.Duration, twin bool) {
	now := mb.clock.Now()
	switch {
	case registered:
		return 0, true // another process took the id while this one was silent
	case !q.until.IsZero() && !now.Before(q.until):
		return 0, true // the entry was written again while this one waited: alive
	case q.until.IsZero():
		q.until = now.Add(mb.quiet() - e.Age)
		mb.log.Info().Str("incarnation", e.Incarnation).Dur("age", e.Age).Dur("wait", q.until.Sub(now)).
			Msg("registry entry of this node id written lately by another process; waiting to see whether it lives")
	}
	// A little past the instant, so that the entry's age has surely passed
	// Quiet on the server's clock too.
	return q.until.Sub(now) + max(mb.quiet()/20, time.Millisecond), false
}

// stepAside stops this process for a twin: it reports the error wrapping
// ErrDuplicateNodeID once, and stops the election on a goroutine of its own
// (Stop waits for the loops that call stepAside).
func (mb *membership) stepAside(cause error) {
	err := fmt.Errorf("%w: %q: %w; this process steps aside: its election stops, it works no item and gives its items up; "+
		"give every process its own NodeID, or stop the other process first", ErrDuplicateNodeID, mb.cfg.NodeID, cause)
	mb.mu.Lock()
	if mb.aside != nil {
		mb.mu.Unlock()
		return
	}
	mb.aside = err
	mb.mu.Unlock()
	mb.log.Error().Err(err).Msg("stepping aside")
	mb.emitError(err)
	stop := mb.stop // set by Start before the loops that step aside run
	if stop == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), mb.cfg.LockTTL)
		defer cancel()
		_ = stop(ctx)
	}()
}

// stepAsideIfTwin steps aside when err is a refusal of a write by a
// registered process (registry.ErrInUse), and reports whether it did.
func (mb *membership) stepAsideIfTwin(err error) bool {
	var e *registry.InUseError
	if !errors.As(err, &e) {
		return false
	}
	mb.stepAside(e)
	return true
}
