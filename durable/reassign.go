package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/rendezvous"
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// Pick chooses the slave that takes over one entry of a removed slave: one
// of slaves (the live slaves, sorted, without the removed one and this
// process; never empty). m is the entry's envelope; when the entry could
// not be decoded, m has only ID set, to the entry's stream id. It runs on
// the caller's goroutine and must not block.
type Pick func(m pubsub.Message, slaves []string) string

// PickRendezvous is the default Pick: rendezvous (highest random weight)
// hashing of the message id over the slaves, so entries spread evenly, the
// choice does not depend on the order of the list, and a slave leaving
// moves only the entries that would have gone to it. Weighted choices, as
// in package assign, fit the same signature.
func PickRendezvous(m pubsub.Message, slaves []string) string {
	best, bestScore := "", uint64(0)
	for _, s := range slaves {
		if sc := rendezvous.Hash(m.ID, s); best == "" || sc > bestScore || (sc == bestScore && s < best) {
			best, bestScore = s, sc
		}
	}
	return best
}

// Reassigned is the outcome of Router.Reassign.
type Reassigned struct {
	// Moved is the number of entries moved, by new owner.
	Moved map[string]int
	// Gone counts entries acknowledged by their consumer between the read
	// and the move (not moved: they were handled).
	Gone int
	// Dropped counts entries without an envelope (not written by herd):
	// deleted, not moved.
	Dropped int
	// Calls is the number of move script calls, each one round trip.
	Calls int
}

// Total returns the number of entries moved.
func (r Reassigned) Total() int {
	n := 0
	for _, v := range r.Moved {
		n += v
	}
	return n
}

// Reassign moves every entry of the inbox of fromID that is not yet
// acknowledged (delivered and unacknowledged, or not delivered yet) to the
// inboxes of the live slaves, each to the slave pick chooses (nil:
// PickRendezvous), and deletes the emptied inbox. Call it when fromID is
// gone for good; Sweep (and so Maintain) calls it for every inbox whose
// process is no longer live in the registry, and for this process's own.
//
// Each batch of up to Config.ReassignBatch entries is one script call that
// checks, in the same atomic step as the moves, that this process still
// holds the lock under its term: a deposed master moves nothing and gets an
// error matching ErrNotMaster and keyspace.ErrFenced. A moved entry keeps its
// envelope (message id, sender, original term, payload), is written under
// this process's term (so slaves that know this term accept it), and
// carries its deliveries so far, which the next handler sees added to its
// own. Entries are read and moved oldest first, and each slave's share
// keeps their order.
//
// It returns ErrNoSlaves, moving nothing, when no other live slave exists:
// the entries stay until a call finds one. If fromID is still running (it
// was removed by mistake, or is about to come back), it may be handling an
// entry while the entry moves: that entry is then handled twice.
func (r *Router) Reassign(ctx context.Context, fromID string, pick Pick) (Reassigned, error) {
	res := Reassigned{Moved: map[string]int{}}
	if err := route.CheckName("slave id", fromID); err != nil {
		return res, err
	}
	if pick == nil {
		pick = PickRendezvous
	}
	term, err := route.LiveTerm(r.mastership)
	if err != nil {
		return res, err
	}
	mv := &reassignment{r: r, fromID: fromID, from: r.keys.Inbox(fromID), term: term, pick: pick}
	for {
		entries, err := r.client.XRangeN(ctx, mv.from, "-", "+", int64(r.cfg.ReassignBatch)).Result()
		if err != nil {
			return res, fmt.Errorf("reassign: read %q: %w", mv.from, err)
		}
		if len(entries) == 0 {
			return res, nil
		}
		if err := mv.batch(ctx, entries, &res); err != nil {
			return res, err
		}
	}
}

// reassignment is one Reassign call under way: the inbox it empties, the
// term its moves are fenced by, and the live slaves the entries go to,
// listed once, when the first batch is read.
type reassignment struct {
	r      *Router
	fromID string // the process whose inbox is emptied
	from   string // its inbox
	term   int64
	pick   Pick
	slaves []string // nil until the first batch
}

// batch moves entries, the oldest of the inbox, in one fenced inbox_move
// call, each to the slave pick chooses, and counts the outcome in res.
func (mv *reassignment) batch(ctx context.Context, entries []redis.XMessage, res *Reassigned) error {
	slaves, err := mv.targets(ctx)
	if err != nil {
		return err
	}
	moves, err := mv.moves(entries, slaves)
	if err != nil {
		return err
	}
	res.Calls++
	r := mv.r
	ids, err := rdb.InboxMove(ctx, r.client, r.keys, r.mastership.NodeID(), mv.term, keyspace.InboxGroup, mv.from, moves)
	if err != nil {
		return fmt.Errorf("reassign the inbox of %q: %w", mv.fromID, err) // matches ErrNotMaster too when fenced
	}
	res.count(ids, moves, len(r.keys.Inbox("")))
	return nil
}

// targets returns the live slaves the entries may move to, listing them
// at the first call.
func (mv *reassignment) targets(ctx context.Context) ([]string, error) {
	if mv.slaves != nil {
		return mv.slaves, nil
	}
	if mv.r.slaves == nil {
		return nil, errors.New("durable: Reassign: the Router has no SlaveLister")
	}
	var err error
	mv.slaves, err = mv.r.liveSlaves(ctx, mv.fromID)
	return mv.slaves, err
}

// moves asks pick for the slave of each entry; ErrBadPick when it names
// one that is not among slaves.
func (mv *reassignment) moves(entries []redis.XMessage, slaves []string) ([]rdb.Move, error) {
	moves := make([]rdb.Move, len(entries))
	for i, e := range entries {
		to := mv.pick(envelope(e), slaves)
		if _, ok := slices.BinarySearch(slaves, to); !ok {
			return nil, fmt.Errorf("%w: %q is not one of %q", ErrBadPick, to, slaves)
		}
		moves[i] = rdb.Move{EntryID: e.ID, To: mv.r.keys.Inbox(to)}
	}
	return moves, nil
}

// envelope is the message a Pick sees for entry e: its envelope, or, when
// the entry has none that decodes, a message with only ID set, to the
// entry's stream id.
func envelope(e redis.XMessage) pubsub.Message {
	raw, ok := e.Values[rdb.InboxFieldMessage].(string)
	if !ok {
		return pubsub.Message{ID: e.ID}
	}
	m, err := pubsub.ParseMessage([]byte(raw))
	if err != nil {
		return pubsub.Message{ID: e.ID}
	}
	return m
}

// count adds the outcome of one inbox_move call: ids answers moves, in
// order; an inbox's name is its process id after prefix bytes.
func (r *Reassigned) count(ids []string, moves []rdb.Move, prefix int) {
	for i, id := range ids {
		switch id {
		case rdb.MovedGone:
			r.Gone++
		case rdb.MovedDropped:
			r.Dropped++
		default:
			r.Moved[moves[i].To[prefix:]]++
		}
	}
}

// mayTake reports whether the live slave id may take the entries of the
// inbox of fromID: it is neither fromID nor this process, and its id is a
// valid name.
func (r *Router) mayTake(id, fromID string) bool {
	return id != fromID && id != r.mastership.NodeID() && route.CheckName("slave id", id) == nil
}

// liveSlaves lists the live slaves other than fromID and this process,
// sorted; ErrNoSlaves when there is none.
func (r *Router) liveSlaves(ctx context.Context, fromID string) ([]string, error) {
	nodes, err := r.slaves.Slaves(ctx)
	if err != nil {
		return nil, fmt.Errorf("reassign: list slaves: %w", err)
	}
	var ids []string
	for _, n := range nodes {
		if r.mayTake(n.NodeID, fromID) {
			ids = append(ids, n.NodeID)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil, fmt.Errorf("reassign the inbox of %q: %w", fromID, ErrNoSlaves)
	}
	return ids, nil
}
