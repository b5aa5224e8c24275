package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/cmd/herd/internal/operate"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestAssignments: herd assignments shows each item's planned slave and
// owner and its state, one row per slave, and the same as JSON; a slave
// cut off shows its items moving until its ownership expires.
func TestAssignments(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	env := map[string]string{"REDIS_URL": herdtest.URL(inst)}
	// An unknown lock exits 7 as herd status does.
	code, out, errOut := herd(t, env, "-lock", "cams", "assignments")
	if code != operate.ExitUnknownLock || out != "" || !strings.Contains(errOut, `herd assignments: unknown lock name "cams": nothing is registered under it`) {
		t.Fatalf("assignments of nothing: exit %d, %q %q", code, out, errOut)
	}
	ctx := context.Background()
	admin := inst.Client(t)
	k := keyspace.NewKeys("cams", false)
	a := k.Assign(assign.DefaultSet)
	acq, err := rdb.Acquire(ctx, admin, k, "m", time.Hour, nil, 0)
	if err != nil || acq.Term == 0 {
		t.Fatalf("acquire = %+v, %v", acq, err)
	}
	if err := admin.SAdd(ctx, a.Items, "cam-1", "cam-2", "cam-3").Err(); err != nil {
		t.Fatal(err)
	}
	// An unknown set of a known lock exits 7 too, naming the sets there.
	code, out, errOut = herd(t, env, "-lock", "cams", "assignments", "-set", "cameras")
	if code != operate.ExitUnknownLock || out != "" || !strings.HasSuffix(errOut, `; item sets of lock "cams" with items: items`+"\n") {
		t.Fatalf("assignments -set cameras: exit %d, %q %q", code, out, errOut)
	}
	// A set emptied with SetItems keeps its version: known, no items.
	if err := admin.Incr(ctx, k.Assign("emptied").Version).Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = herd(t, env, "-lock", "cams", "assignments", "-set", "emptied")
	if code != 0 || errOut != "" || out != "no items in set emptied\n" {
		t.Fatalf("assignments -set emptied: exit %d, %q %q; want status 0 and no items", code, out, errOut)
	}
	// cam-1 and cam-2 to slave a, cam-3 unplanned; a claims its two.
	if _, err := rdb.AssignPlan(ctx, admin, k, a, "m", acq.Term, nil, map[string]string{"cam-1": "a", "cam-2": "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.AssignSync(ctx, admin, a, "a", "i1", time.Minute, false, nil); err != nil {
		t.Fatal(err)
	}
	// cam-2 moves to b; a has not given it up yet.
	if _, err := rdb.AssignPlan(ctx, admin, k, a, "m", acq.Term, map[string]string{"cam-2": "a"}, map[string]string{"cam-2": "b"}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = herd(t, env, "-lock", "cams", "assignments")
	if code != 0 || errOut != "" {
		t.Fatalf("assignments: exit %d, stderr %s", code, errOut)
	}
	for _, re := range []string{
		`(?m)^ITEM +PLANNED +OWNER +LEFT +STATE$`,
		`(?m)^cam-1 +a +a +[0-9.]+s +owned$`,
		`(?m)^cam-2 +b +a +[0-9.]+s +moving$`,
		`(?m)^cam-3 +- +- +- +unassigned$`,
		`(?m)^a +1 +2$`,
		`(?m)^b +1 +0$`,
		`(?m)^3 items: 1 owned, 1 moving, 0 waiting, 1 unassigned, 0 removed$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("assignments output does not match %s:\n%s", re, out)
		}
	}
	code, out, _ = herd(t, env, "-lock", "cams", "assignments", "-o", "json")
	var as operate.Assignments
	if err := json.Unmarshal([]byte(out), &as); code != 0 || err != nil {
		t.Fatalf("assignments -o json: exit %d, %v\n%s", code, err, out)
	}
	if as.Counts[operate.ItemMoving] != 1 || len(as.Items) != 3 || as.Items[1].Owner != "a" || as.Items[1].Planned != "b" || as.Items[1].LeftMs <= 0 {
		t.Errorf("assignments -o json: %+v", as)
	}
	code, _, errOut = herd(t, env, "-lock", "cams", "assignments", "-set", "a b")
	if code != operate.ExitUsage || !strings.Contains(errOut, "-set") {
		t.Errorf("assignments -set 'a b': exit %d, %s", code, errOut)
	}
}
