package masterelection

import (
	"slices"
	"strconv"

	"github.com/herdkit/herd/internal/rendezvous"
)

// maxSuccession is how many slaves a master ranks in its succession.
const maxSuccession = 3

// succession is a master's ranking of its slaves for the next election
// (rdb.Succession): the maxSuccession candidate slaves (their registry
// entry at join says so) that rank first by ranksBefore: the highest
// Priority first, then, among equal priorities, the highest rendezvous hash
// of the master's term, so that each term ranks the herd afresh and every
// slave of one priority is first as often as any other. A slave that stops
// being a candidate after its join stays ranked (its turn passes unused,
// costing the next one a step), and one that becomes a candidate after it
// is ranked from the next term.
type succession struct {
	key    string         // the term, the rendezvous key
	slaves map[string]int // every candidate slave the tracker reports live, with its priority
	order  []string       // the ranking: at most maxSuccession slaves
}

func newSuccession(term int64) *succession {
	return &succession{key: strconv.FormatInt(term, 10), slaves: map[string]int{}}
}

// ranksBefore reports whether slave a, of priority pa, ranks before slave
// b, of priority pb, in the succession of the term whose decimal form is
// key. It is also the hand-back's order among slaves it may pick.
func ranksBefore(key, a string, pa int, b string, pb int) bool {
	if pa != pb {
		return pa > pb
	}
	ha, hb := rendezvous.Hash(key, a), rendezvous.Hash(key, b)
	return ha > hb || ha == hb && a < b
}

// before reports whether slave a ranks before slave b.
func (s *succession) before(a, b string) bool {
	return ranksBefore(s.key, a, s.slaves[a], b, s.slaves[b])
}

// join adds slave id of priority p and reports whether the ranking
// changed.
func (s *succession) join(id string, p int) bool {
	if _, ok := s.slaves[id]; ok {
		return false
	}
	s.slaves[id] = p
	return s.rank(id)
}

// leave removes slave id and reports whether the ranking changed; a ranked
// slave's place goes to the best of the rest.
func (s *succession) leave(id string) bool {
	if _, ok := s.slaves[id]; !ok {
		return false
	}
	delete(s.slaves, id)
	if !slices.Contains(s.order, id) {
		return false
	}
	s.order = s.order[:0]
	for other := range s.slaves {
		s.rank(other)
	}
	return true
}

// rank puts slave id in the ranking when it belongs there and reports
// whether it does.
func (s *succession) rank(id string) bool {
	i := len(s.order)
	for i > 0 && s.before(id, s.order[i-1]) {
		i--
	}
	if i >= maxSuccession {
		return false
	}
	s.order = slices.Insert(s.order, i, id)
	s.order = s.order[:min(len(s.order), maxSuccession)]
	return true
}
