package assign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/herdkit/herd/registry"
)

// equalSlaves returns n slaves with the same capabilities.
func equalSlaves(n int, c registry.Capabilities) []Slave {
	s := make([]Slave, n)
	for i := range s {
		s[i] = Slave{ID: fmt.Sprintf("node-%03d", i), Capabilities: c}
	}
	return s
}

// spread returns the most and the fewest items a slave of slaves holds in p.
func spread(p Plan, slaves []Slave) (lo, hi int) {
	counts := p.Counts()
	lo = math.MaxInt
	for _, s := range slaves {
		lo, hi = min(lo, counts[s.ID]), max(hi, counts[s.ID])
	}
	return lo, hi
}

// TestEqualSlavesHoldEqualCounts: 40 items over 4 slaves of equal
// capabilities are 10 each (the plan by rendezvous alone gave 6, 8, 12 and
// 14), and equal slaves hold counts within one of each other at any size,
// every item placed when they have room for it.
func TestEqualSlavesHoldEqualCounts(t *testing.T) {
	for _, c := range []registry.Capabilities{{}, caps(100, 100)} {
		p, err := Assign(items(40), equalSlaves(4, c))
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := spread(p, equalSlaves(4, c)); lo != 10 || hi != 10 {
			t.Errorf("capabilities %+v: 40 items over 4 equal slaves: %v, want 10 each", c, p.Counts())
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		n, k, max := r.IntN(3000), 1+r.IntN(60), 1+r.IntN(200)
		c := caps(max, 1+r.IntN(100))
		if r.IntN(3) == 0 {
			c = registry.Capabilities{}
			max = n
		}
		s := equalSlaves(k, c)
		p, err := Assign(items(n), s)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := spread(p, s)
		if hi-lo > 1 || hi > max {
			t.Fatalf("%d items over %d slaves of %+v: counts from %d to %d", n, k, c, lo, hi)
		}
		if want := min(n, k*max); len(p.Owner) != want || len(p.Unassigned) != n-want {
			t.Fatalf("%d items over %d slaves of %+v: %d placed, want %d", n, k, c, len(p.Owner), want)
		}
	}
}

// share returns each slave's exact share of n items: proportional to its
// weight, at most its cap, adding up to the items there is room for
// (found by bisection, independently of Reassign's water-filling).
func share(n int, slaves []Slave) map[string]float64 {
	capOf := func(s Slave) float64 {
		if s.Capabilities == (registry.Capabilities{}) {
			return float64(n)
		}
		return float64(max(s.Capabilities.MaxSubscriptions, 0))
	}
	room := 0.0
	for _, s := range slaves {
		if Weight(s.Capabilities) > 0 {
			room += capOf(s)
		}
	}
	total := math.Min(float64(n), room)
	sum := func(l float64) float64 {
		t := 0.0
		for _, s := range slaves {
			t += math.Min(capOf(s), l*Weight(s.Capabilities))
		}
		return t
	}
	lo, hi := 0.0, 1.0
	for sum(hi) < total {
		hi *= 2
	}
	for range 200 {
		if mid := (lo + hi) / 2; sum(mid) < total {
			lo = mid
		} else {
			hi = mid
		}
	}
	out := map[string]float64{}
	for _, s := range slaves {
		out[s.ID] = math.Min(capOf(s), hi*Weight(s.Capabilities))
	}
	return out
}

// randomSlaves returns k slaves of random capabilities: some of weight 0,
// some without capabilities, the others with random caps and workloads.
func randomSlaves(r *rand.Rand, k int) []Slave {
	s := make([]Slave, k)
	for i := range s {
		s[i].ID = fmt.Sprintf("node-%03d", i)
		switch r.IntN(10) {
		case 0:
			s[i].Capabilities = caps(r.IntN(50), 0)
		case 1:
		default:
			s[i].Capabilities = caps(1+r.IntN(300), 1+r.IntN(100))
		}
	}
	return s
}

// TestWeightedSlavesHoldTheirShare: over random fleets, every slave holds
// its weight's share within one, never more than its MaxSubscriptions,
// nothing at weight 0, and every item is placed when there is room.
func TestWeightedSlavesHoldTheirShare(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		n, k := r.IntN(5000), 1+r.IntN(40)
		s := randomSlaves(r, k)
		p, err := Assign(items(n), s)
		if err != nil {
			t.Fatal(err)
		}
		want, counts := share(n, s), p.Counts()
		room := 0
		for _, x := range s {
			got := counts[x.ID]
			if math.Abs(float64(got)-want[x.ID]) >= 1+1e-6 {
				t.Fatalf("%d items over %+v: %s holds %d, its share is %.3f", n, s, x.ID, got, want[x.ID])
			}
			if x.Capabilities != (registry.Capabilities{}) && got > x.Capabilities.MaxSubscriptions {
				t.Fatalf("%s holds %d, over its cap %d", x.ID, got, x.Capabilities.MaxSubscriptions)
			}
			if Weight(x.Capabilities) == 0 && got != 0 {
				t.Fatalf("%s has weight 0 and holds %d", x.ID, got)
			}
			switch {
			case Weight(x.Capabilities) == 0:
			case x.Capabilities == (registry.Capabilities{}):
				room += n
			default:
				room += x.Capabilities.MaxSubscriptions
			}
		}
		if len(p.Owner) != min(n, room) {
			t.Fatalf("%d items, room for %d: %d placed", n, room, len(p.Owner))
		}
	}
}

// TestReassignMovesOnlyWhatMust: over random sizes, a slave joining N
// slaves takes at most ceil(items/(N+1)) items and about nothing else
// moves; a slave leaving moves its items and at most a rounding's worth
// more; planning again with nothing changed moves nothing; and the order
// of the inputs does not matter.
func TestReassignMovesOnlyWhatMust(t *testing.T) {
	const slack = 2 // items a rounding may move beyond those that must
	r := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		n, k := r.IntN(3000), 1+r.IntN(50)
		it := items(n)
		var s []Slave
		equal := r.IntN(2) == 0
		if equal {
			s = equalSlaves(k, registry.Capabilities{})
		} else {
			s = randomSlaves(r, k)
		}
		before, err := Assign(it, s)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := Reassign(before, it, s); len(Moves(before, again)) != 0 {
			t.Fatalf("%d items over %d slaves: planning again moved %d", n, k, len(Moves(before, again)))
		}
		rev := slices.Clone(s)
		slices.Reverse(rev)
		revItems := slices.Clone(it)
		slices.Reverse(revItems)
		if same, _ := Reassign(before, revItems, rev); len(Moves(before, same)) != 0 {
			t.Fatalf("the order of the inputs moved %d items", len(Moves(before, same)))
		}

		joiner := Slave{ID: "joiner", Capabilities: s[r.IntN(k)].Capabilities}
		joined, err := Reassign(before, it, append(slices.Clone(s), joiner))
		if err != nil {
			t.Fatal(err)
		}
		eligible := 0
		for _, x := range s {
			if Weight(x.Capabilities) > 0 {
				eligible++
			}
		}
		moves, toJoiner := Moves(before, joined), joined.Counts()["joiner"]
		if equal && toJoiner > (n+eligible)/(eligible+1) {
			t.Fatalf("%d items over %d equal slaves: the joiner took %d", n, eligible, toJoiner)
		}
		other := 0
		for _, m := range moves {
			if m.To != joiner.ID {
				other++
			}
		}
		if other > slack {
			t.Fatalf("%d items over %d slaves: a join moved %d items, %d of them not to the joiner (%+v)", n, k, len(moves), other, moves)
		}

		gone := r.IntN(k)
		left, err := Reassign(before, it, slices.Delete(slices.Clone(s), gone, gone+1))
		if err != nil {
			t.Fatal(err)
		}
		had := before.Counts()[s[gone].ID]
		moves = Moves(before, left)
		if other := len(moves) - had; other > slack {
			t.Fatalf("%d items over %d slaves: %s left with %d items, %d moved (%+v)", n, k, s[gone].ID, had, len(moves), moves)
		}
		for _, m := range moves {
			if m.From == s[gone].ID && m.To == s[gone].ID {
				t.Fatalf("move %+v to the slave that left", m)
			}
		}
	}
}
