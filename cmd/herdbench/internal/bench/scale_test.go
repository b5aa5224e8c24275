package bench_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herdbench/internal/bench"
)

// tinyScale is a scale set that runs in seconds: LockTTL 1s, so a crash
// failover takes about a second.
func tinyScale(sizes ...int) bench.ScaleSet {
	return bench.ScaleSet{Sizes: sizes, LockTTL: time.Second, Handovers: 2, Failovers: 1, Broadcasts: 3, Idle: 300 * time.Millisecond}
}

// TestScale: at N=3 every count the scale rows report is sane: a handover
// and a failover each take at least one acquire attempt (and not more than
// a few per slave), every process holds at least one connection, a
// Subscriber adds none or some, Broadcasts reach both slaves, nothing
// errs, one master at a time.
func TestScale(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 3
	set := tinyScale(n)
	p, err := bench.MeasureScale(ctx, env, set, n)
	if err != nil {
		t.Fatalf("MeasureScale(%d) = %+v, %v", n, p, err)
	}
	if p.N != n || p.StartTook <= 0 || p.StartFailed != 0 || p.StartErrors != 0 {
		t.Errorf("start: N %d, took %v, %d failed, %d error events; want N %d, all started, no errors", p.N, p.StartTook, p.StartFailed, p.StartErrors, n)
	}
	if len(p.HandoverAcquires) != set.Handovers || len(p.Handover) != set.Handovers || len(p.StopTook) != set.Handovers {
		t.Fatalf("handovers: %v acquires, %v, %v; want %d of each", p.HandoverAcquires, p.Handover, p.StopTook, set.Handovers)
	}
	for i, a := range p.HandoverAcquires {
		if a < 1 || a > 3*(n-1) {
			t.Errorf("handover %d: %d acquire attempts; want 1 to %d (each of %d slaves a few at most)", i+1, a, 3*(n-1), n-1)
		}
		if p.Handover[i] <= 0 || p.Handover[i] > 10*time.Second {
			t.Errorf("handover %d took %v", i+1, p.Handover[i])
		}
	}
	if len(p.FailoverAcquires) != 1 || p.FailoverAcquires[0] < 1 || p.FailoverAcquires[0] > 3*(n-1) {
		t.Errorf("failover acquire attempts %v; want one failover with 1 to %d", p.FailoverAcquires, 3*(n-1))
	}
	// From the cut: the lock had up to a LockTTL left, then jitter.
	if len(p.Failover) != 1 || p.Failover[0] <= 0 || p.Failover[0] > 3*set.LockTTL {
		t.Errorf("failover took %v; want one, within 3 LockTTLs", p.Failover)
	}
	if p.ConnsBase < 1 || p.ConnsNoSub < 1 || p.ConnsSub < p.ConnsNoSub {
		t.Errorf("connections: %d before, %.2f per process without Subscribers, %.2f with; want at least 1, and no fewer with", p.ConnsBase, p.ConnsNoSub, p.ConnsSub)
	}
	if p.Idle <= 0 || p.Commands <= 0 || p.Executed < p.PerSecond["evalsha"] || p.PerSecond["evalsha"] <= 0 || p.IdleCPU < 0 {
		t.Errorf("idle: window %v, %.2f commands/s, %.2f executed/s, %v by name, CPU %.2f%%; want the slaves' script calls counted", p.Idle, p.Commands, p.Executed, p.PerSecond, p.IdleCPU)
	}
	if len(p.Broadcast) != set.Broadcasts || len(p.BroadcastCall) != set.Broadcasts {
		t.Errorf("broadcasts: %v, %v; want %d", p.Broadcast, p.BroadcastCall, set.Broadcasts)
	}
	if p.Masters != 1 || p.LaterErrors != 0 {
		t.Errorf("at most %d masters at once, %d later error events; want 1 and 0", p.Masters, p.LaterErrors)
	}
	if _, err := bench.MeasureScale(ctx, env, set, 1); err == nil {
		t.Error("MeasureScale of 1 process: no error")
	}
}

// TestScaleRows: the step "herd" of Run gives rows 13-15 for every size,
// each with its value, and the ratio row only for the sizes after the first.
func TestScaleRows(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	set := tinyScale(2, 3)
	set.Handovers, set.Failovers, set.Broadcasts = 1, 0, 1
	rep := bench.Run(ctx, env, "test", bench.Plan{Only: []string{"herd"}, ScaleSet: set}, io.Discard)
	if err := rep.Err(); err != nil {
		for _, r := range rep.Rows {
			if r.Err != nil {
				t.Errorf("row %s %q: %v", r.ID, r.What, r.Err)
			}
		}
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rep.Rows {
		ids = append(ids, r.ID)
		if r.Value == "" && r.P50 <= 0 {
			t.Errorf("row %s %q has no result", r.ID, r.What)
		}
		if !strings.HasPrefix(r.What, "scale, N=2: ") && !strings.HasPrefix(r.What, "scale, N=3: ") {
			t.Errorf("row %s %q does not name its size", r.ID, r.What)
		}
	}
	// 13: handover acquires ×2, handover ×2, ratio ×1 (no failovers);
	// 14: connections ×2 ×2, CPU ×2, commands ×2, start errors ×2; 15: ×2.
	want := []string{"13a", "13b", "13c", "13d", "13e", "14a", "14b", "14c", "14d", "14e", "14f", "14g", "14h", "14i", "14j", "15a", "15b"}
	if !slices.Equal(ids, want) {
		t.Errorf("rows %v, want %v", ids, want)
	}
}

func TestParseScaleSizes(t *testing.T) {
	got, err := bench.ParseScaleSizes(" 10, 100,1000 ")
	if err != nil || !slices.Equal(got, []int{10, 100, 1000}) {
		t.Errorf("ParseScaleSizes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1", "ten", "10,x", "2,3,4,5,6,7"} {
		if _, err := bench.ParseScaleSizes(bad); err == nil {
			t.Errorf("ParseScaleSizes(%q): no error", bad)
		}
	}
}
