package operate

import (
	"strings"
	"testing"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// A read counts the dead letters; a user whose ACL refuses XLEN still
// reads everything else, the count unknown and the refusal said.
func TestSnapshotCountsDeadLetters(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	admin := inst.Client(t)
	herdtest.Herd(t, inst, "orders", "a")
	k := keyspace.NewKeys("orders", false)
	herdtest.Admin(t, admin, "XADD", k.Dead, "*", rdb.InboxFieldMessage, "{}", rdb.InboxFieldTerm, "1")
	herdtest.Admin(t, admin, "XADD", k.Dead, "*", rdb.InboxFieldMessage, "{}", rdb.InboxFieldTerm, "1")
	s, err := reader(t, dial(t, herdtest.URL(inst), "orders")).Read(testCtx(t))
	if err != nil || s.DeadLetters != 2 || s.DeadLettersError != "" {
		t.Fatalf("read: %d dead letters (%q), %v", s.DeadLetters, s.DeadLettersError, err)
	}

	herdtest.Admin(t, admin, "ACL", "SETUSER", "nodead", "on", ">pw", "~*", "&*", "+@all", "-xlen")
	s, err = reader(t, dial(t, "redis://nodead:pw@"+inst.Options().Addr, "orders")).Read(testCtx(t))
	if err != nil || s.Master == nil || s.Master.NodeID != "a" {
		t.Fatalf("read without XLEN: %+v, %v", s.Master, err)
	}
	if s.DeadLetters != -1 || !strings.Contains(s.DeadLettersError, "NOPERM") || !strings.Contains(s.DeadLettersError, "orders:dead") {
		t.Fatalf("read without XLEN: %d dead letters, %q", s.DeadLetters, s.DeadLettersError)
	}
}
