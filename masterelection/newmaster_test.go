package masterelection

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/registry"
)

// TestNewMasterIsNoSlave: read at the start of OnMasterAcquired, Slaves,
// SlaveCount, Slave and ProcessesByRole(RoleSlave) never list the new
// master, over handovers between processes (a new master's registry entry
// still says slave until its first write as master). Before, they listed
// it in most handovers, and a rebalancer assigned work to the master.
func TestNewMasterIsNoSlave(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	ctx := context.Background()
	var (
		mu       sync.Mutex
		problems []string
		acquired = make(chan string, 16)
	)
	nodes := map[string]*MasterElection{}
	checked := 0
	newNode := func(id string) *MasterElection {
		cfg := DefaultConfig()
		cfg.LockName, cfg.NodeID, cfg.LockTTL = "trap", id, time.Second
		cfg.Capabilities = registry.Capabilities{MaxSubscriptions: 10, PreferredWorkload: 100}
		m, err := New(inst.Client(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.OnMasterAcquired(func(ctx context.Context, term int64) {
			defer func() { acquired <- m.NodeID() }()
			var found []string
			if ss, err := m.Slaves(ctx); err == nil {
				for _, s := range ss {
					if s.NodeID == m.NodeID() {
						found = append(found, "Slaves")
					}
					if s.Capabilities.MaxSubscriptions != 10 {
						found = append(found, fmt.Sprintf("Slaves without capabilities (%+v)", s))
					}
				}
			}
			if ps, err := m.ProcessesByRole(ctx, registry.RoleSlave); err == nil && slices.ContainsFunc(ps, func(p registry.ProcessInfo) bool { return p.NodeID == m.NodeID() }) {
				found = append(found, "ProcessesByRole")
			}
			if _, err := m.Slave(ctx, m.NodeID()); err == nil {
				found = append(found, "Slave")
			}
			if n, err := m.SlaveCount(ctx); err == nil && n > 2 {
				found = append(found, fmt.Sprintf("SlaveCount %d", n))
			}
			mu.Lock()
			checked++
			if len(found) > 0 {
				problems = append(problems, fmt.Sprintf("term %d: new master %s listed by %v", term, m.NodeID(), found))
			}
			mu.Unlock()
		})
		return m
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		nodes[id] = newNode(id)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if err := nodes[id].Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, m := range nodes {
			_ = m.Stop(ctx)
		}
	}()
	<-acquired
	const handovers = 8
	for i := range handovers {
		var master *MasterElection
		for _, m := range nodes {
			if m.IsMaster() {
				master = m
			}
		}
		if master == nil {
			t.Fatalf("handover %d: no master", i)
		}
		// Let the slaves' entries be written before the handover.
		time.Sleep(100 * time.Millisecond)
		if err := master.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-acquired:
		case <-time.After(10 * time.Second):
			t.Fatalf("handover %d: no new master", i)
		}
		// The stopped process comes back as a slave.
		m := newNode(master.NodeID())
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		nodes[m.NodeID()] = m
	}
	mu.Lock()
	defer mu.Unlock()
	if checked != handovers+1 {
		t.Errorf("%d masterships checked, want %d", checked, handovers+1)
	}
	if len(problems) > 0 {
		t.Fatalf("%d of %d masterships:\n%v", len(problems), checked, problems)
	}
}
