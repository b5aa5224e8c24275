package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/overlap"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
)

// transferHerd starts one election per id on inst (the first id is
// elected first) and checks, when the test ends, that no two of them were
// master at once.
func transferHerd(t *testing.T, inst *redistest.Instance, lock string, ids []string, tweak func(*masterelection.Config)) ([]*masterelection.MasterElection, *overlap.Watch) {
	t.Helper()
	var nodes []*masterelection.MasterElection
	for _, id := range ids {
		cfg := fastConfig(lock, id)
		if tweak != nil {
			tweak(&cfg)
		}
		n := newElection(t, inst.Client(t), cfg)
		start(t, n)
		nodes = append(nodes, n)
	}
	if !nodes[0].IsMaster() {
		t.Fatalf("%s not master after starting first", ids[0])
	}
	w := overlap.Start(nodes)
	t.Cleanup(func() { w.Check(t) }) // also ends the watch
	return nodes, w
}

func TestTransfer(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		testCtx := func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t.Cleanup(cancel)
			return ctx
		}

		t.Run("to a live candidate", func(t *testing.T) {
			ctx := testCtx(t)
			nodes, _ := transferHerd(t, inst, "transfer-live", []string{"a", "b", "c"}, nil)
			a, c := nodes[0], nodes[2]
			old := a.Term()
			if err := a.Transfer(ctx, "c"); err != nil {
				t.Fatalf("transfer to c: %v", err)
			}
			waitUntil(t, "c master", 5*time.Second, c.IsMaster)
			if !c.IsMaster() || c.Term() <= old {
				t.Fatalf("c master %v with term %d after the transfer, old term %d", c.IsMaster(), c.Term(), old)
			}
			if a.IsMaster() || !a.Candidate() {
				t.Fatalf("a after the transfer: master %v, candidate %v; want a candidate slave", a.IsMaster(), a.Candidate())
			}
		})

		t.Run("to a dead node", func(t *testing.T) {
			ctx := testCtx(t)
			nodes, _ := transferHerd(t, inst, "transfer-dead", []string{"a", "b"}, nil)
			err := nodes[0].Transfer(ctx, "ghost")
			if !errors.Is(err, masterelection.ErrTransferNotTaken) {
				t.Fatalf("transfer to a node that does not run: %v, want ErrTransferNotTaken", err)
			}
			// After the window the normal election goes on: a or b.
			waitUntil(t, "a or b master", 5*time.Second, func() bool { return len(masters(nodes)) == 1 })
		})

		t.Run("to a non-candidate", func(t *testing.T) {
			ctx := testCtx(t)
			nodes, _ := transferHerd(t, inst, "transfer-paused", []string{"a", "b", "c"}, func(cfg *masterelection.Config) {
				cfg.NonCandidate = cfg.NodeID == "c"
			})
			err := nodes[0].Transfer(ctx, "c")
			if !errors.Is(err, masterelection.ErrTransferNotTaken) {
				t.Fatalf("transfer to a non-candidate: %v, want ErrTransferNotTaken", err)
			}
			waitUntil(t, "a or b master", 5*time.Second, func() bool { return len(masters(nodes)) == 1 })
			if nodes[2].IsMaster() {
				t.Fatalf("after the window: a %v, b %v, c %v", nodes[0].IsMaster(), nodes[1].IsMaster(), nodes[2].IsMaster())
			}
		})

		t.Run("step down", func(t *testing.T) {
			ctx := testCtx(t)
			nodes, _ := transferHerd(t, inst, "transfer-none", []string{"a", "b"}, nil)
			if err := nodes[0].Transfer(ctx, ""); err != nil {
				t.Fatalf("step down: %v", err)
			}
			// Redis has b's lock; b says so once its acquire's reply is read.
			waitUntil(t, "b master", 5*time.Second, nodes[1].IsMaster)
			if nodes[0].IsMaster() {
				t.Fatalf("after stepping down: a %v, b %v", nodes[0].IsMaster(), nodes[1].IsMaster())
			}
		})

		t.Run("from a slave", func(t *testing.T) {
			ctx := testCtx(t)
			nodes, _ := transferHerd(t, inst, "transfer-slave", []string{"a", "b"}, nil)
			if err := nodes[1].Transfer(ctx, "a"); !errors.Is(err, masterelection.ErrNotMaster) {
				t.Fatalf("transfer by a slave: %v, want ErrNotMaster", err)
			}
			// And back: the master can transfer to the node that asked.
			if err := nodes[0].Transfer(ctx, "b"); err != nil {
				t.Fatalf("transfer to b: %v", err)
			}
			if err := nodes[0].Transfer(ctx, "b"); !errors.Is(err, masterelection.ErrNotMaster) {
				t.Fatalf("a second transfer by the old master: %v, want ErrNotMaster", err)
			}
		})

		t.Run("remote request", func(t *testing.T) {
			ctx := testCtx(t)
			nodes, _ := transferHerd(t, inst, "transfer-remote", []string{"a", "b"}, nil)
			var ignored atomic.Int32
			nodes[0].OnError(func(err error) {
				if strings.Contains(err.Error(), "control channel") {
					ignored.Add(1)
				}
			})
			admin := inst.Client(t)
			control := nodes[0].Keys().Control
			// A request that names no live process changes nothing.
			if err := admin.Publish(ctx, control, `{"request":"transfer","to":"ghost"}`).Err(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the request for ghost is reported", 5*time.Second, func() bool { return ignored.Load() > 0 })
			if !nodes[0].IsMaster() {
				t.Fatalf("a request naming no live process moved the mastership")
			}
			// Requests for another term (an earlier master's, sent again)
			// change nothing either. The feed reads in order: once a
			// second request for ghost is reported, they were read.
			term := nodes[0].Term()
			for _, other := range []int64{term - 1, term + 1} {
				if err := admin.Publish(ctx, control, fmt.Sprintf(`{"request":"transfer","to":"b","term":%d}`, other)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := admin.Publish(ctx, control, `{"request":"transfer","to":"ghost"}`).Err(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the second request for ghost is reported", 5*time.Second, func() bool { return ignored.Load() > 1 })
			if !nodes[0].IsMaster() || nodes[0].Term() != term {
				t.Fatalf("a request for another term moved the mastership")
			}
			if err := admin.Publish(ctx, control, fmt.Sprintf(`{"request":"transfer","to":"b","term":%d}`, term)).Err(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "b master by remote request", 5*time.Second, nodes[1].IsMaster)
		})

		t.Run("remote requests off", func(t *testing.T) {
			ctx := testCtx(t)
			nodes, _ := transferHerd(t, inst, "transfer-off", []string{"a", "b"}, func(cfg *masterelection.Config) {
				cfg.IgnoreRemoteTransfers = true
			})
			admin := inst.Client(t)
			// Ignored requests leave no trace; a request and then a
			// round trip through the same server shows none was acted on.
			if n, err := admin.Publish(ctx, nodes[0].Keys().Control, fmt.Sprintf(`{"request":"transfer","to":%q}`, "b")).Result(); err != nil || n != 0 {
				t.Fatalf("publish on the control channel: %d receivers, %v; want none listening", n, err)
			}
			if !nodes[0].IsMaster() {
				t.Fatalf("a lost its mastership to an ignored request")
			}
		})
	})
}

// TestTransferRoundRobin: masters hand over to each other in turn, faster
// than TransferWindow; each named node takes over at once, even one that
// handed over itself a moment before.
func TestTransferRoundRobin(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes, _ := transferHerd(t, inst, "transfer-rr", []string{"a", "b", "c"}, func(cfg *masterelection.Config) {
			cfg.TransferWindow = 500 * time.Millisecond
		})
		for r := range 9 {
			from, to := nodes[r%3], nodes[(r+1)%3]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := from.Transfer(ctx, to.NodeID())
			cancel()
			if err != nil {
				t.Fatalf("round %d, %s to %s: %v", r+1, from.NodeID(), to.NodeID(), err)
			}
			waitUntil(t, to.NodeID()+" master", 5*time.Second, to.IsMaster)
		}
	})
}
