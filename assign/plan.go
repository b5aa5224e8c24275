package assign

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/herdkit/herd/internal/rendezvous"
	"github.com/herdkit/herd/registry"
)

// ErrInvalidInput is wrapped by every error of Assign about its arguments.
var ErrInvalidInput = errors.New("assign: invalid input")

// Slave is one candidate for work.
type Slave struct {
	// ID identifies the slave (its herd node id). It must be unique and
	// not empty.
	ID string
	// Capabilities are what the slave published in the registry.
	Capabilities registry.Capabilities
}

// Weight returns the relative share of work a slave with capabilities c
// should get: MaxSubscriptions × PreferredWorkload / 100, with
// PreferredWorkload clamped to 0..100. A slave of weight 0 (MaxSubscriptions
// or PreferredWorkload 0 or less) gets nothing. A slave that published no
// capabilities at all (the zero Capabilities, masterelection's default) has
// weight 1 and no cap: every such slave gets an equal share.
func Weight(c registry.Capabilities) float64 {
	if c == (registry.Capabilities{}) {
		return 1
	}
	if c.MaxSubscriptions <= 0 || c.PreferredWorkload <= 0 {
		return 0
	}
	return float64(c.MaxSubscriptions) * float64(min(c.PreferredWorkload, 100)) / 100
}

// Plan is an assignment of items to slaves.
type Plan struct {
	// Owner maps every assigned item to the id of its slave.
	Owner map[string]string
	// Unassigned lists, sorted, the items no slave had room for.
	Unassigned []string
}

// Items returns the items assigned to slaveID, sorted.
func (p Plan) Items(slaveID string) []string {
	var items []string
	for item, owner := range p.Owner {
		if owner == slaveID {
			items = append(items, item)
		}
	}
	slices.Sort(items)
	return items
}

// Counts returns how many items each slave got; slaves with none are absent.
func (p Plan) Counts() map[string]int {
	n := make(map[string]int)
	for _, owner := range p.Owner {
		n[owner]++
	}
	return n
}

// Assign returns the plan for items over slaves with no previous plan:
// Reassign(Plan{}, items, slaves).
func Assign(items []string, slaves []Slave) (Plan, error) {
	return Reassign(Plan{}, items, slaves)
}

// Reassign returns the plan for items over slaves that moves as few items
// of prev as balance allows. The order of the lists does not matter; the
// same arguments give the same plan on every process. It returns an error
// wrapping ErrInvalidInput, naming the value, for an empty or duplicate
// item or slave id.
//
// Each eligible slave (Weight above 0) gets a quota: its share of the items
// by weight, at most its MaxSubscriptions (slaves without capabilities
// have no cap), rounded down or up so that the quotas add up to the items
// there is room for. Slaves of equal capabilities hold counts within one
// of each other, and every slave within one of its share. An item keeps its
// owner in prev while that slave is eligible and under its quota (a slave
// over quota keeps the items it ranks highest); every other item goes to
// the slave that ranks it highest by weighted rendezvous hashing among
// those still under quota. So a slave that leaves moves only its own items
// (and, with very few items per slave, a rounding's worth more), and a
// slave that joins takes about its share, mostly from the others' surplus.
// Reassign(p, items, slaves) returns p itself when p came from the same
// items and slaves.
func Reassign(prev Plan, items []string, slaves []Slave) (Plan, error) {
	eligible, err := eligibleSlaves(slaves)
	if err != nil {
		return Plan{}, err
	}
	sorted, err := sortedItems(items)
	if err != nil {
		return Plan{}, err
	}
	p := newPlacement(eligible, len(sorted))
	p.keep(prev, sorted)
	p.fill(sorted)
	return p.plan, nil
}

// eligibleSlaves returns the slaves of Weight above 0, sorted by id, or an
// error for an empty or duplicate id.
func eligibleSlaves(slaves []Slave) ([]Slave, error) {
	seen := make(map[string]bool, len(slaves))
	var eligible []Slave
	for _, s := range slaves {
		if s.ID == "" {
			return nil, fmt.Errorf("%w: a slave has an empty id", ErrInvalidInput)
		}
		if seen[s.ID] {
			return nil, fmt.Errorf("%w: slave id %q is listed twice", ErrInvalidInput, s.ID)
		}
		seen[s.ID] = true
		if Weight(s.Capabilities) > 0 {
			eligible = append(eligible, s)
		}
	}
	slices.SortFunc(eligible, func(a, b Slave) int { return strings.Compare(a.ID, b.ID) })
	return eligible, nil
}

// sortedItems returns a sorted copy of items, or an error for an empty or
// duplicate item.
func sortedItems(items []string) ([]string, error) {
	sorted := slices.Clone(items)
	slices.Sort(sorted)
	for i, item := range sorted {
		if item == "" {
			return nil, fmt.Errorf("%w: an item is empty", ErrInvalidInput)
		}
		if i > 0 && sorted[i-1] == item {
			return nil, fmt.Errorf("%w: item %q is listed twice", ErrInvalidInput, item)
		}
	}
	return sorted, nil
}

// placement is a plan being built by Reassign: the eligible slaves, sorted
// by id, with their weights and quotas.
type placement struct {
	eligible []Slave
	weights  []float64
	q        quotas
	plan     Plan
}

// newPlacement sets the quotas of n items over the eligible slaves, with an
// empty plan.
func newPlacement(eligible []Slave, n int) *placement {
	p := &placement{eligible: eligible, weights: make([]float64, len(eligible))}
	caps := make([]int, len(eligible))
	for i, s := range eligible {
		p.weights[i] = Weight(s.Capabilities)
		caps[i] = s.Capabilities.MaxSubscriptions
		if s.Capabilities == (registry.Capabilities{}) {
			caps[i] = n // no cap
		}
	}
	p.q = newQuotas(n, p.weights, caps)
	p.plan = Plan{Owner: make(map[string]string, n)}
	return p
}

// score is how highly slave i ranks item.
func (p *placement) score(i int, item string) float64 {
	return rendezvous.Score(item, p.eligible[i].ID, p.weights[i])
}

// give assigns item to slave i, counting it against its quota.
func (p *placement) give(i int, item string) {
	p.q.take(i)
	p.plan.Owner[item] = p.eligible[i].ID
}

// keep lets each eligible owner in prev keep the items it ranks highest,
// up to its lower quota, then one more where a rounding allows: the
// roundings up go to the slaves whose best surplus item they rank highest,
// so a plan that already holds them keeps them.
func (p *placement) keep(prev Plan, sorted []string) {
	var extra []surplus
	for i, own := range p.owned(prev, sorted) {
		if x, ok := p.keepBest(i, own); ok {
			extra = append(extra, x)
		}
	}
	slices.SortFunc(extra, func(a, b surplus) int { return cmpScore(a.score, b.score, a.item, b.item) })
	for _, x := range extra {
		if p.q.room(x.slave) {
			p.give(x.slave, x.item)
		}
	}
}

// surplus is the best item a slave held in the previous plan beyond its
// lower quota: a rounding up lets it keep that one too.
type surplus struct {
	slave int
	item  string
	score float64
}

// owned returns, for each eligible slave, the items of sorted it owns in
// prev, in sorted's order.
func (p *placement) owned(prev Plan, sorted []string) [][]string {
	index := make(map[string]int, len(p.eligible))
	for i, s := range p.eligible {
		index[s.ID] = i
	}
	owned := make([][]string, len(p.eligible))
	for _, item := range sorted {
		if i, ok := index[prev.Owner[item]]; ok {
			owned[i] = append(owned[i], item)
		}
	}
	return owned
}

// keepBest lets slave i keep the items of own, those it owned, that it
// ranks highest, up to its lower quota, and returns its best item beyond
// when its quota may round up.
func (p *placement) keepBest(i int, own []string) (surplus, bool) {
	slices.SortFunc(own, func(a, b string) int { return cmpScore(p.score(i, a), p.score(i, b), a, b) })
	n := min(len(own), p.q.lo[i])
	for _, item := range own[:n] {
		p.plan.Owner[item] = p.eligible[i].ID
	}
	p.q.count[i] = n
	if n < len(own) && p.q.lo[i] < p.q.hi[i] {
		return surplus{i, own[n], p.score(i, own[n])}, true
	}
	return surplus{}, false
}

// fill gives every item not kept to the slave under quota that ranks it
// highest, in the items' order; an item no slave has room for is
// unassigned.
func (p *placement) fill(sorted []string) {
	for _, item := range sorted {
		if _, ok := p.plan.Owner[item]; ok {
			continue
		}
		if best := p.best(item); best >= 0 {
			p.give(best, item)
		} else {
			p.plan.Unassigned = append(p.plan.Unassigned, item)
		}
	}
}

// best returns the slave under quota that ranks item highest, -1 when none
// has room.
func (p *placement) best(item string) int {
	best := -1
	var bestScore float64
	for i := range p.eligible {
		if !p.q.room(i) {
			continue
		}
		if sc := p.score(i, item); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// cmpScore orders by score, highest first, then by name.
func cmpScore(sa, sb float64, a, b string) int {
	switch {
	case sa > sb:
		return -1
	case sa < sb:
		return 1
	}
	return strings.Compare(a, b)
}

// quotas are the counts each slave may hold: lo[i] at least, hi[i] (lo[i]
// or lo[i]+1) at most, with only extra of the slaves above lo.
type quotas struct {
	lo, hi, count []int
	extra, used   int
}

// newQuotas splits min(n, the caps' sum) items over slaves of the given
// weights and caps: each slave's share is proportional to its weight, at
// most its cap (the capped slaves' surplus goes to the others by weight),
// and lo and hi are that share rounded down and up.
func newQuotas(n int, weights []float64, caps []int) quotas {
	q := quotas{lo: make([]int, len(weights)), hi: make([]int, len(weights)), count: make([]int, len(weights))}
	room := 0
	for _, c := range caps {
		room += min(c, n)
	}
	total := min(n, room)
	q.extra = total - q.share(total, weights, caps)
	// Floats may put the quotas a unit off the total: meet it.
	q.lowerRoundings()
	q.raiseRoundings(caps)
	return q
}

// share sets lo and hi by water-filling total items over the slaves and
// returns the sum of lo: the slaves whose cap is below their share, in the
// order of cap per weight, hold their cap; the rest share by weight.
func (q *quotas) share(total int, weights []float64, caps []int) int {
	order := make([]int, len(weights))
	var w float64
	for i := range order {
		order[i] = i
		w += weights[i]
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := float64(caps[a])/weights[a], float64(caps[b])/weights[b]
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	left := total
	sum := 0
	for k, i := range order {
		if share := float64(left) * weights[i] / w; share >= float64(caps[i]) {
			q.lo[i], q.hi[i] = caps[i], caps[i]
			left -= caps[i]
			w -= weights[i]
			sum += caps[i]
			continue
		}
		for _, j := range order[k:] {
			sum += q.round(j, float64(left)*weights[j]/w, caps[j])
		}
		break
	}
	return sum
}

// round sets slave j's lo to its share rounded down (to the share itself
// when that is an integer up to the rounding of floats), within 0..limit,
// and its hi one above where the share has a fraction and the limit
// allows. It returns lo.
func (q *quotas) round(j int, share float64, limit int) int {
	lo := int(math.Floor(share))
	integral := false
	if r := math.Round(share); math.Abs(share-r) < 1e-9*max(1, share) {
		lo, integral = int(r), true
	}
	lo = min(max(lo, 0), limit)
	q.lo[j], q.hi[j] = lo, lo
	if !integral && lo < limit {
		q.hi[j] = lo + 1
	}
	return lo
}

// lowerRoundings lowers, in the slaves' order, the quotas that are not
// rounded up while the roundings exceed the total.
func (q *quotas) lowerRoundings() {
	for i := 0; q.extra < 0 && i < len(q.lo); i++ {
		if q.lo[i] > 0 && q.lo[i] == q.hi[i] {
			q.lo[i]--
			q.extra++
		}
	}
}

// raiseRoundings lets, in the slaves' order, quotas under their cap round
// up while fewer are open to a rounding up than the total needs.
func (q *quotas) raiseRoundings(caps []int) {
	open := q.open()
	for i := 0; q.extra > open && i < len(q.lo); i++ {
		if q.lo[i] == q.hi[i] && q.hi[i] < caps[i] {
			q.hi[i]++
			open++
		}
	}
}

// open returns how many quotas may round up (hi above lo).
func (q *quotas) open() int {
	open := 0
	for i := range q.lo {
		if q.hi[i] > q.lo[i] {
			open++
		}
	}
	return open
}

// room reports whether slave i may take one more item.
func (q *quotas) room(i int) bool {
	return q.count[i] < q.lo[i] || (q.count[i] < q.hi[i] && q.used < q.extra)
}

// take gives slave i one more item; room(i) must hold.
func (q *quotas) take(i int) {
	if q.count[i] >= q.lo[i] {
		q.used++
	}
	q.count[i]++
}

// Move is one item changing hands between two plans.
type Move struct {
	Item string
	// From is the previous owner, "" when the item was unassigned or new.
	From string
	// To is the new owner, "" when the item is now unassigned or gone.
	To string
}

// Moves lists the items whose owner differs between before and after,
// sorted by item.
func Moves(before, after Plan) []Move {
	var moves []Move
	for item, from := range before.Owner {
		if to := after.Owner[item]; to != from {
			moves = append(moves, Move{Item: item, From: from, To: to})
		}
	}
	for item, to := range after.Owner {
		if _, ok := before.Owner[item]; !ok {
			moves = append(moves, Move{Item: item, To: to})
		}
	}
	slices.SortFunc(moves, func(a, b Move) int { return strings.Compare(a.Item, b.Item) })
	return moves
}
