package assign

import (
	"errors"
	"fmt"
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

// Assign returns the plan for items over slaves. The order of both lists
// does not matter. It returns an error wrapping ErrInvalidInput, naming the
// value, for an empty or duplicate item or slave id.
func Assign(items []string, slaves []Slave) (Plan, error) {
	seen := make(map[string]bool, len(slaves))
	var eligible []Slave
	var weights []float64
	for _, s := range slaves {
		if s.ID == "" {
			return Plan{}, fmt.Errorf("%w: a slave has an empty id", ErrInvalidInput)
		}
		if seen[s.ID] {
			return Plan{}, fmt.Errorf("%w: slave id %q is listed twice", ErrInvalidInput, s.ID)
		}
		seen[s.ID] = true
		if w := Weight(s.Capabilities); w > 0 {
			eligible = append(eligible, s)
			weights = append(weights, w)
		}
	}
	sorted := slices.Clone(items)
	slices.Sort(sorted)
	for i, item := range sorted {
		if item == "" {
			return Plan{}, fmt.Errorf("%w: an item is empty", ErrInvalidInput)
		}
		if i > 0 && sorted[i-1] == item {
			return Plan{}, fmt.Errorf("%w: item %q is listed twice", ErrInvalidInput, item)
		}
	}

	plan := Plan{Owner: make(map[string]string, len(sorted))}
	room := make([]int, len(eligible))
	for i, s := range eligible {
		room[i] = s.Capabilities.MaxSubscriptions
		if s.Capabilities == (registry.Capabilities{}) {
			room[i] = len(sorted) // no cap
		}
	}
	// Items are placed in sorted order, so that when caps bind the result
	// is still the same on every process.
	for _, item := range sorted {
		best := -1
		var bestScore float64
		for i, s := range eligible {
			if room[i] == 0 {
				continue
			}
			sc := rendezvous.Score(item, s.ID, weights[i])
			if best < 0 || sc > bestScore || (sc == bestScore && s.ID < eligible[best].ID) {
				best, bestScore = i, sc
			}
		}
		if best < 0 {
			plan.Unassigned = append(plan.Unassigned, item)
			continue
		}
		room[best]--
		plan.Owner[item] = eligible[best].ID
	}
	return plan, nil
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
