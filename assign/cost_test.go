package assign_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// trips is a go-redis hook that records every round trip (a command or a
// pipeline) as the names of its commands, EVALSHA named by its script.
type trips struct {
	mu  sync.Mutex
	log []string
}

func name(cmd redis.Cmder) string {
	if cmd.Name() == "evalsha" && len(cmd.Args()) > 1 && cmd.Args()[1] == scripts.AssignSyncSHA {
		return "assign-sync"
	}
	return cmd.Name()
}

func (h *trips) add(cmds ...redis.Cmder) {
	var names []string
	for _, c := range cmds {
		names = append(names, name(c))
	}
	h.mu.Lock()
	h.log = append(h.log, strings.Join(names, "+"))
	h.mu.Unlock()
}

func (h *trips) since(i int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log[min(i, len(h.log)):])
}

func (h *trips) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.log)
}

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.add(cmd); return next(ctx, cmd) }
}
func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.add(cmds...); return next(ctx, cmds) }
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
			h := &trips{}
			w := f.worker(t, "a", s, h)
			waitOwned(t, w, items, 10*time.Second)
			start := h.len()
			for h.len() < start+5 { // five renewals, however long they take
				time.Sleep(f.cfg.RenewInterval)
			}
			got := h.since(start)
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
