package assign_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/registry"
)

// tap records a client's round trips (handshakes left out), the assign
// sync script named "assign-sync".
func tap() *wiretap.Tap {
	return &wiretap.Tap{Name: func(cmd redis.Cmder) string {
		if cmd.Name() == "evalsha" && len(cmd.Args()) > 1 && cmd.Args()[1] == rdb.AssignSyncSHA {
			return "assign-sync"
		}
		return cmd.Name()
	}}
}

// TestOneRoundTripPerRenewal: a Worker that holds its items renews all of
// them in one round trip, the assign sync script alone, with 1 item as with
// 1,000: every round trip it makes is exactly that.
func TestOneRoundTripPerRenewal(t *testing.T) {
	for _, n := range []int{1, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFixture(t)
			f.cfg.RenewInterval = 20 * time.Millisecond
			items := make([]string, n)
			for i := range items {
				items[i] = fmt.Sprintf("item-%04d", i)
			}
			f.plan(t, "a", items)
			s := newSpans()
			h := tap()
			w := f.worker(t, "a", s, h)
			waitOwned(t, w, items, 10*time.Second)
			start := h.Trips()
			for h.Trips() < start+5 { // five renewals, however long they take
				time.Sleep(f.cfg.RenewInterval)
			}
			got := h.Since(start)
			_ = w.Stop(context.Background())
			s.wg.Wait()
			for _, trip := range got {
				if trip != "assign-sync" {
					t.Fatalf("a renewal round trip with %d items was %q, want one assign sync call (all: %v)", n, trip, got)
				}
			}
		})
	}
}

// BenchmarkPlan10kItems100Slaves: the plan of 10,000 items over 100
// slaves of mixed weights.
func BenchmarkPlan10kItems100Slaves(b *testing.B) {
	items := make([]string, 10000)
	for i := range items {
		items[i] = fmt.Sprintf("camera-%05d", i)
	}
	slaves := make([]assign.Slave, 100)
	for i := range slaves {
		slaves[i] = assign.Slave{ID: fmt.Sprintf("node-%03d", i), Capabilities: registry.Capabilities{MaxSubscriptions: 200, PreferredWorkload: 50 + i%50}}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := assign.Assign(items, slaves); err != nil {
			b.Fatal(err)
		}
	}
}
