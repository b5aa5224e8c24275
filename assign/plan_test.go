package assign

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/herdkit/herd/registry"
)

func caps(max, workload int) registry.Capabilities {
	return registry.Capabilities{MaxSubscriptions: max, PreferredWorkload: workload}
}

func items(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cam-%04d", i)
	}
	return out
}

func TestWeight(t *testing.T) {
	tests := []struct {
		name string
		caps registry.Capabilities
		want float64
	}{
		{"full workload", caps(40, 100), 40},
		{"half workload", caps(40, 50), 20},
		{"workload above 100 is clamped", caps(40, 250), 40},
		{"zero max", caps(0, 100), 0},
		{"negative max", caps(-5, 100), 0},
		{"zero workload", caps(40, 0), 0},
		{"negative workload", caps(40, -1), 0},
		{"none published: an equal share", registry.Capabilities{}, 1},
		{"detections only: nothing", registry.Capabilities{CanProcessDetections: true}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Weight(tt.caps); got != tt.want {
				t.Fatalf("Weight(%+v) = %v, want %v", tt.caps, got, tt.want)
			}
		})
	}
}

func TestAssignRejectsBadInput(t *testing.T) {
	tests := []struct {
		name   string
		items  []string
		slaves []Slave
		want   string
	}{
		{"empty slave id", items(3), []Slave{{ID: "", Capabilities: caps(10, 100)}}, "empty id"},
		{"duplicate slave", items(3), []Slave{{ID: "a", Capabilities: caps(10, 100)}, {ID: "a", Capabilities: caps(5, 100)}}, `slave id "a" is listed twice`},
		{"duplicate slave of weight 0", items(3), []Slave{{ID: "a"}, {ID: "a"}}, `slave id "a" is listed twice`},
		{"empty item", []string{"x", ""}, []Slave{{ID: "a", Capabilities: caps(10, 100)}}, "an item is empty"},
		{"duplicate item", []string{"x", "y", "x"}, []Slave{{ID: "a", Capabilities: caps(10, 100)}}, `item "x" is listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Assign(tt.items, tt.slaves)
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("Assign: error %v, want one wrapping ErrInvalidInput", err)
			}
			if got := err.Error(); !strings.Contains(got, tt.want) {
				t.Fatalf("Assign: error %q does not say %q", got, tt.want)
			}
		})
	}
}

// fleet is five slaves of different weights with room for everything.
func fleet() []Slave {
	return []Slave{
		{ID: "node-1", Capabilities: caps(2000, 50)},
		{ID: "node-2", Capabilities: caps(2000, 100)},
		{ID: "node-3", Capabilities: caps(1500, 80)},
		{ID: "node-4", Capabilities: caps(1000, 100)},
		{ID: "node-5", Capabilities: caps(3000, 25)},
	}
}

func TestAssignIsDeterministicAndOrderFree(t *testing.T) {
	it := items(500)
	a, err := Assign(it, fleet())
	if err != nil {
		t.Fatal(err)
	}
	rev := slices.Clone(fleet())
	slices.Reverse(rev)
	revItems := slices.Clone(it)
	slices.Reverse(revItems)
	b, err := Assign(revItems, rev)
	if err != nil {
		t.Fatal(err)
	}
	if m := Moves(a, b); len(m) != 0 {
		t.Fatalf("the order of the inputs changed %d owners, first %+v", len(m), m[0])
	}
	if len(a.Owner) != len(it) || len(a.Unassigned) != 0 {
		t.Fatalf("assigned %d and left %d of %d items", len(a.Owner), len(a.Unassigned), len(it))
	}
}

// TestSlaveLeavingMovesOnlyItsItems removes each slave in turn: only its
// items move, and each lands on a remaining slave.
// TestSlavesWithoutCapabilitiesShareEqually: slaves that published no
// capabilities (masterelection's default) get every item between them,
// about equally, with no cap.
func TestSlavesWithoutCapabilitiesShareEqually(t *testing.T) {
	slaves := []Slave{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	p, err := Assign(items(300), slaves)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Unassigned) != 0 {
		t.Fatalf("%d unassigned", len(p.Unassigned))
	}
	for id, n := range p.Counts() {
		if n < 70 || n > 130 {
			t.Errorf("slave %s got %d of 300 items, want about 100", id, n)
		}
	}
}

func TestSlaveLeavingMovesOnlyItsItems(t *testing.T) {
	it := items(2000)
	all := fleet()
	before, err := Assign(it, all)
	if err != nil {
		t.Fatal(err)
	}
	for i, gone := range all {
		t.Run(gone.ID, func(t *testing.T) {
			rest := slices.Delete(slices.Clone(all), i, i+1)
			after, err := Reassign(before, it, rest)
			if err != nil {
				t.Fatal(err)
			}
			moves := Moves(before, after)
			if want := before.Counts()[gone.ID]; len(moves) != want {
				t.Errorf("%d items moved, want exactly the %d of %s", len(moves), want, gone.ID)
			}
			for _, m := range moves {
				if m.From != gone.ID || m.To == "" || m.To == gone.ID {
					t.Fatalf("move %+v: only %s's items may move, to a remaining slave", m, gone.ID)
				}
			}
		})
	}
}

// TestSlaveJoiningTakesOnlyItsShare adds a sixth slave: every item that
// moves moves to it, and it gets about its weight's share.
func TestSlaveJoiningTakesOnlyItsShare(t *testing.T) {
	tests := []struct {
		name   string
		joiner Slave
	}{
		{"light", Slave{ID: "node-6", Capabilities: caps(1000, 20)}},
		{"average", Slave{ID: "node-6", Capabilities: caps(1000, 100)}},
		{"heavy", Slave{ID: "node-6", Capabilities: caps(4000, 100)}},
	}
	it := items(4000)
	before, err := Assign(it, fleet())
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, s := range fleet() {
		total += Weight(s.Capabilities)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after, err := Reassign(before, it, append(fleet(), tt.joiner))
			if err != nil {
				t.Fatal(err)
			}
			moves := Moves(before, after)
			for _, m := range moves {
				if m.To != tt.joiner.ID {
					t.Fatalf("move %+v: items may only move to the new slave", m)
				}
			}
			if got := after.Counts()[tt.joiner.ID]; got != len(moves) {
				t.Fatalf("the new slave got %d items but %d moved", got, len(moves))
			}
			w := Weight(tt.joiner.Capabilities)
			want := float64(len(it)) * w / (total + w)
			if got := float64(len(moves)); math.Abs(got-want) > 0.15*want {
				t.Errorf("the new slave took %v items, want about %.0f (its weight's share)", got, want)
			}
		})
	}
}

// TestRaisingWeightMovesItemsOnlyToThatSlave: a slave that declares more
// capacity takes items from the others, and nothing else moves.
func TestRaisingWeightMovesItemsOnlyToThatSlave(t *testing.T) {
	it := items(2000)
	s := fleet()
	before, err := Assign(it, s)
	if err != nil {
		t.Fatal(err)
	}
	s[3].Capabilities.MaxSubscriptions *= 2
	after, err := Reassign(before, it, s)
	if err != nil {
		t.Fatal(err)
	}
	moves := Moves(before, after)
	if len(moves) == 0 {
		t.Fatal("doubling a weight moved nothing")
	}
	for _, m := range moves {
		if m.To != s[3].ID {
			t.Fatalf("move %+v: items may only move to %s", m, s[3].ID)
		}
	}
}

func TestSharesFollowWeights(t *testing.T) {
	it := items(6000)
	s := fleet()
	plan, err := Assign(it, s)
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, x := range s {
		total += Weight(x.Capabilities)
	}
	counts := plan.Counts()
	for _, x := range s {
		want := float64(len(it)) * Weight(x.Capabilities) / total
		if got := float64(counts[x.ID]); math.Abs(got-want) > 0.1*want {
			t.Errorf("%s got %v items, want about %.0f", x.ID, got, want)
		}
	}
}

func TestCapsAreRespected(t *testing.T) {
	tests := []struct {
		name           string
		items          int
		slaves         []Slave
		wantUnassigned int
	}{
		{"room for all", 40, []Slave{{ID: "a", Capabilities: caps(20, 100)}, {ID: "b", Capabilities: caps(30, 100)}}, 0},
		{"exactly full", 50, []Slave{{ID: "a", Capabilities: caps(20, 100)}, {ID: "b", Capabilities: caps(30, 100)}}, 0},
		{"over capacity", 60, []Slave{{ID: "a", Capabilities: caps(20, 100)}, {ID: "b", Capabilities: caps(30, 100)}}, 10},
		{"weight zero gets nothing", 10, []Slave{{ID: "a", Capabilities: caps(20, 0)}, {ID: "b", Capabilities: caps(5, 100)}}, 5},
		{"no slaves", 7, nil, 7},
		{"no items", 0, []Slave{{ID: "a", Capabilities: caps(20, 100)}}, 0},
		{"small cap, big preference", 100, []Slave{{ID: "a", Capabilities: caps(10, 100)}, {ID: "b", Capabilities: caps(200, 10)}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Assign(items(tt.items), tt.slaves)
			if err != nil {
				t.Fatal(err)
			}
			counts := plan.Counts()
			for _, s := range tt.slaves {
				if counts[s.ID] > s.Capabilities.MaxSubscriptions {
					t.Errorf("%s got %d items, its cap is %d", s.ID, counts[s.ID], s.Capabilities.MaxSubscriptions)
				}
				if Weight(s.Capabilities) == 0 && counts[s.ID] != 0 {
					t.Errorf("%s has weight 0 but got %d items", s.ID, counts[s.ID])
				}
			}
			if len(plan.Unassigned) != tt.wantUnassigned {
				t.Errorf("%d items unassigned, want %d", len(plan.Unassigned), tt.wantUnassigned)
			}
			if len(plan.Owner)+len(plan.Unassigned) != tt.items {
				t.Errorf("%d assigned + %d unassigned != %d items", len(plan.Owner), len(plan.Unassigned), tt.items)
			}
			if !slices.IsSorted(plan.Unassigned) {
				t.Errorf("Unassigned is not sorted: %v", plan.Unassigned)
			}
		})
	}
}

func TestPlanItemsAndMoves(t *testing.T) {
	before := Plan{Owner: map[string]string{"a": "s1", "b": "s1", "c": "s2"}}
	after := Plan{Owner: map[string]string{"a": "s1", "b": "s2", "d": "s2"}, Unassigned: []string{"c"}}
	if got, want := after.Items("s2"), []string{"b", "d"}; !slices.Equal(got, want) {
		t.Fatalf("Items(s2) = %v, want %v", got, want)
	}
	if got := after.Items("nobody"); len(got) != 0 {
		t.Fatalf("Items(nobody) = %v, want none", got)
	}
	want := []Move{{Item: "b", From: "s1", To: "s2"}, {Item: "c", From: "s2"}, {Item: "d", To: "s2"}}
	if got := Moves(before, after); !slices.Equal(got, want) {
		t.Fatalf("Moves = %+v, want %+v", got, want)
	}
}

// TestIntegralShareIsExact: a share that is an integer up to the rounding
// of floats (4 items × 0.3 / 1.2 = 0.9999999999999998) gets exactly that
// many items, never one more.
func TestIntegralShareIsExact(t *testing.T) {
	slaves := []Slave{
		{ID: "a", Capabilities: registry.Capabilities{MaxSubscriptions: 3, PreferredWorkload: 10}}, // weight 0.3: share 1
		{ID: "b", Capabilities: registry.Capabilities{MaxSubscriptions: 5, PreferredWorkload: 10}}, // 0.5: 1.67
		{ID: "c", Capabilities: registry.Capabilities{MaxSubscriptions: 4, PreferredWorkload: 10}}, // 0.4: 1.33
	}
	for seed := range 50 {
		items := make([]string, 4)
		for i := range items {
			items[i] = fmt.Sprintf("item-%d-%d", seed, i)
		}
		p, err := Assign(items, slaves)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(p.Items("a")); n != 1 {
			t.Fatalf("items %v: slave a of share 1 got %d: %v", items, n, p.Owner)
		}
	}
}
