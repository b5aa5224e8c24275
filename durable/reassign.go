package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
	from := r.keys.Inbox(fromID)
	var slaves []string
	for {
		entries, err := r.client.XRangeN(ctx, from, "-", "+", int64(r.cfg.ReassignBatch)).Result()
		if err != nil {
			return res, fmt.Errorf("reassign: read %q: %w", from, err)
		}
		if len(entries) == 0 {
			return res, nil
		}
		if slaves == nil {
			if r.slaves == nil {
				return res, errors.New("durable: Reassign: the Router has no SlaveLister")
			}
			if slaves, err = r.liveSlaves(ctx, fromID); err != nil {
				return res, err
			}
		}
		moves := make([]rdb.Move, len(entries))
		for i, e := range entries {
			m := pubsub.Message{ID: e.ID}
			if raw, ok := e.Values[rdb.InboxFieldMessage].(string); ok {
				if pm, err := pubsub.ParseMessage([]byte(raw)); err == nil {
					m = pm
				}
			}
			to := pick(m, slaves)
			if _, ok := slices.BinarySearch(slaves, to); !ok {
				return res, fmt.Errorf("%w: %q is not one of %q", ErrBadPick, to, slaves)
			}
			moves[i] = rdb.Move{EntryID: e.ID, To: r.keys.Inbox(to)}
		}
		res.Calls++
		ids, err := rdb.InboxMove(ctx, r.client, r.keys, r.mastership.NodeID(), term, keyspace.InboxGroup, from, moves)
		if errors.Is(err, keyspace.ErrFenced) {
			return res, fmt.Errorf("reassign the inbox of %q: %w", fromID, err) // matches ErrNotMaster too
		}
		if err != nil {
			return res, fmt.Errorf("reassign the inbox of %q: %w", fromID, err)
		}
		for i, id := range ids {
			switch id {
			case rdb.MovedGone:
				res.Gone++
			case rdb.MovedDropped:
				res.Dropped++
			default:
				res.Moved[moves[i].To[len(r.keys.Inbox("")):]]++
			}
		}
	}
}

// liveSlaves lists the live slaves other than fromID and this process,
// sorted; ErrNoSlaves when there is none.
func (r *Router) liveSlaves(ctx context.Context, fromID string) ([]string, error) {
	nodes, err := r.slaves.Slaves(ctx)
	if err != nil {
		return nil, fmt.Errorf("reassign: list slaves: %w", err)
	}
	self := r.mastership.NodeID()
	var ids []string
	for _, n := range nodes {
		if n.NodeID == fromID || n.NodeID == self || route.CheckName("slave id", n.NodeID) != nil {
			continue
		}
		ids = append(ids, n.NodeID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil, fmt.Errorf("reassign the inbox of %q: %w", fromID, ErrNoSlaves)
	}
	return ids, nil
}
