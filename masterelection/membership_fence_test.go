package masterelection

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// A master whose lock moved on while it still believes it leads (its
// renewals fail, its deadline has not come) must not keep a master entry in
// the registry: Redis refuses the membership loop's next master write, the
// entry is written with role slave and no term, and the election reports
// ErrNotMaster. The election decides nothing here; the registry script does,
// against the lock and the term the election passed with the write.
func TestMembershipWriteFencedByRedis(t *testing.T) {
	w := newWorld(t)
	renewals := newScriptFault(rdb.RenewSHA, errors.New("injected: connection reset"))
	a := w.nodeWith(testConfig("a"), renewals)
	w.start(a)
	waitFor(t, "a registered as master", func() bool { return roles(t, a.MasterElection)["a"] == registry.RoleMaster })
	term := a.Term()

	// Another process holds the lock under a newer term; a hears nothing of
	// it (no notice) and its renewals fail, so it goes on as master until
	// its deadline, LockTTL after its last renewal.
	renewals.set(faultFail, -1)
	keys := keyspace.NewKeys("test", false)
	if err := w.mr.Set(keys.Master, "x"); err != nil {
		t.Fatal(err)
	}
	if err := w.mr.Set(keys.Term, strconv.FormatInt(term+1, 10)); err != nil {
		t.Fatal(err)
	}
	fenced := func() bool {
		for _, err := range a.rec.errors() {
			if errors.Is(err, registry.ErrNotMaster) {
				return true
			}
		}
		return false
	}
	// One HeartbeatInterval brings the membership loop's master heartbeat,
	// well before a's deadline.
	w.until(fenced, testConfig("a").HeartbeatInterval+200*time.Millisecond, 100*time.Millisecond, "a's master heartbeat refused", a)
	if !a.IsMaster() {
		t.Fatal("a no longer believes it is master: the write was not made under a mastership the process still held")
	}
	p, err := a.Process(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if p.Role != registry.RoleSlave || p.Term != 0 {
		t.Fatalf("a's entry after the refused write: role %q term %d, want role slave without a term", p.Role, p.Term)
	}
	// Later heartbeats keep the slave role: nothing writes the master entry back.
	w.advance(2*testConfig("a").HeartbeatInterval, 100*time.Millisecond, a)
	if p, err := a.Process(context.Background(), "a"); err != nil || p.Role != registry.RoleSlave {
		t.Fatalf("a's entry later: %+v, %v; want role slave", p, err)
	}
}
