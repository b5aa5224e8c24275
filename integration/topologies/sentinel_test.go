//go:build topologies

package topologies

import (
	"context"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
)

// TestSentinelPrimaryFailover kills the Redis primary under three herd
// processes that reach it through Sentinel failover clients. The sentinels
// promote the replica; herd recovers with one master under a larger term, a
// full registry and working routing. Then the new primary loses every herd
// key at once (FLUSHALL, standing for writes that never reached the replica)
// and herd recovers again. It logs how long each step took.
//
// No two processes are ever master at once here, because the failover takes
// longer than LockTTL (SentinelDownAfter alone is 1s): the old master has
// fenced itself before the promoted replica accepts a write. With a LockTTL
// longer than the failover that is not guaranteed (docs/topologies.md).
func TestSentinelPrimaryFailover(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		d := redistest.StartSentinel(t, s)
		dep := onSentinel(d)
		const lock = "primary-failover"
		procs := startProcs(t, dep, lock, 3, nil)
		old := waitOneMaster(t, procs, 0, 2*time.Second)
		waitRegistry(t, old, procs, 5*time.Second)
		oldTerm := old.el.Term()
		watch := watchOverlaps(procs)

		began := time.Now()
		dead := d.KillPrimary(t)
		primary := d.WaitPromoted(t, dead, 0)
		promoted := time.Since(began)
		next := waitOneMaster(t, procs, oldTerm, 30*time.Second)
		elected := time.Since(began)
		waitRegistry(t, next, procs, 30*time.Second)
		listed := time.Since(began)
		checkRouting(t, dep, lock, next, others(procs, next), true)
		routed := time.Since(began)
		t.Logf("%s: sentinel failover: replica promoted after %v, one herd master (term %d > %d) after %v, registry complete after %v, routing after %v",
			s.Name, ms(promoted), next.el.Term(), oldTerm, ms(elected), ms(listed), ms(routed))

		// Writes lost at the failover: the new primary forgets every herd key.
		lostTerm := next.el.Term()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		began = time.Now()
		if err := primary.Client(t).FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		again := waitOneMaster(t, procs, lostTerm, 30*time.Second)
		elected = time.Since(began)
		waitRegistry(t, again, procs, 30*time.Second)
		t.Logf("%s: after losing every herd key: one herd master (term %d > %d) after %v, registry rebuilt after %v",
			s.Name, again.el.Term(), lostTerm, ms(elected), ms(time.Since(began)))
		watch.Check(t)
	})
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
