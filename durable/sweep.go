package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/internal/atomicmax"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
)

// Swept is the outcome of Router.Sweep.
type Swept struct {
	// Term is the term the sweep ran under.
	Term int64
	// Inboxes is the number of inboxes looked at.
	Inboxes int
	// Adopted is the number of entries of older terms added again under
	// Term (Config.DropBacklog unset); Dropped the number deleted instead
	// (Config.DropBacklog set).
	Adopted, Dropped int
	// Malformed is the number of entries without an envelope deleted (not
	// written by herd).
	Malformed int
	// Moved is the number of entries moved out of the inboxes of processes
	// that are not live, by the process whose inbox they left.
	Moved map[string]int
	// Deleted is the number of inboxes deleted: empty, and their process
	// not live, or this process's own, emptied by a move.
	Deleted int
	// Waiting are the processes, not live, whose inboxes stay in place
	// within their Config.Grace, waiting for them to come back (sorted).
	Waiting []string
	// Orphans are the processes, not live (or this process, master),
	// whose inboxes still hold entries because no live slave could take
	// them (ErrNoSlaves) or their move failed; the next sweep tries again.
	Orphans []string
	// Calls is the number of script calls, each one round trip.
	Calls int
}

// changed reports whether the sweep did or left anything worth reporting.
func (s Swept) changed() bool { return s.acted() || len(s.Orphans) > 0 }

// acted reports whether the sweep changed the inboxes: entries adopted,
// dropped, deleted as malformed or moved, inboxes deleted.
func (s Swept) acted() bool {
	return s.Adopted+s.Dropped+s.Malformed+s.Deleted+len(s.Moved) > 0
}

// Sweep makes every inbox (the set keyspace.Keys.Inboxes lists) hold only
// work that a live process will read under this mastership:
//
//   - the entries written under an older term, which a slave that knows
//     this term would not handle, are adopted: added again at the inbox's
//     end under this process's term, with their envelope (message id) and
//     delivery count kept; with Config.DropBacklog they are deleted and
//     counted instead. A slave that met such an entry before the sweep
//     left it in its inbox (acknowledged, not deleted) for this step.
//   - the inboxes of processes that are not live in the registry, and this
//     process's own inbox (what it was sent while a slave, which no
//     Consumer of a master need read), are moved to the live slaves with
//     Reassign (pick as there; nil: PickRendezvous), and deleted once
//     empty; the inbox of a process this Router saw live stays in place
//     until its Config.Grace has ended (Swept.Waiting), for a process with
//     its id to come back and read it. This process's inbox is not adopted: a Consumer it may still
//     run would read adopted entries while they move. With Config.Terms
//     set, that Consumer rejects the moved entries' old terms; the entry in
//     its hands at the change is handled there and again after the move.
//
// Each script call checks that this process holds the lock under its term
// in the same atomic step as its changes, so a deposed master changes
// nothing and gets an error matching ErrNotMaster and keyspace.ErrFenced. An
// entry that a slave was handling under the old term while the sweep
// adopted it is handled twice (Delivery.Deliveries counts both).
//
// Maintain runs Sweep by itself; the first Send or SendBatch of each
// mastership runs its adoption step and waits for it.
func (r *Router) Sweep(ctx context.Context, pick Pick) (Swept, error) {
	term, err := route.LiveTerm(r.mastership)
	if err != nil {
		return Swept{}, err
	}
	res, gone, own, err := r.adopt(ctx, term)
	if err != nil {
		return res, err
	}
	r.backlog.done(term)
	var errs []error
	now := r.cfg.clock.Now()
	for _, id := range r.moveOrder(gone, own) {
		if r.inGrace(id, now) {
			res.Waiting = append(res.Waiting, id)
			continue
		}
		err := r.move(ctx, id, pick, &res)
		if errors.Is(err, ErrNotMaster) {
			r.orphans.set(res.Orphans)
			return res, err
		}
		if err != nil && !errors.Is(err, ErrNoSlaves) {
			errs = append(errs, err)
		}
	}
	r.orphans.set(res.Orphans)
	return res, sweepError(res.Orphans, errs)
}

// moveOrder returns the inboxes a sweep moves: gone, the processes not
// live, with this process's own inbox first when own (it is listed). That
// inbox holds what was sent to this process while it was a slave, which
// the slaves take over whether or not it still runs a Consumer; this
// process is live, whatever the registry said a moment ago.
func (r *Router) moveOrder(gone []string, own bool) []string {
	self := r.mastership.NodeID()
	gone = slices.DeleteFunc(gone, func(id string) bool { return id == self })
	if own {
		gone = append([]string{self}, gone...)
	}
	return gone
}

// inGrace reports whether the inbox of id, a process found gone at now,
// stays in place for its Config.Grace; this process's own inbox never
// does.
func (r *Router) inGrace(id string, now time.Time) bool {
	return id != r.mastership.NodeID() && now.Before(r.waits.until(id, now, r.cfg.Grace))
}

// move empties the inbox of id with Reassign and counts the outcome in
// res: an inbox left with entries is an orphan; an emptied one was deleted
// by Reassign (this process's own only when it held entries).
func (r *Router) move(ctx context.Context, id string, pick Pick, res *Swept) error {
	moved, err := r.Reassign(ctx, id, pick)
	res.addMoved(id, moved)
	if err != nil {
		res.Orphans = append(res.Orphans, id)
		return err
	}
	if id != r.mastership.NodeID() || moved.Total()+moved.Gone+moved.Dropped > 0 {
		res.Deleted++
	}
	return nil
}

// addMoved counts what Reassign did to the inbox of id.
func (s *Swept) addMoved(id string, moved Reassigned) {
	s.Calls += moved.Calls
	s.Malformed += moved.Dropped
	n := moved.Total()
	if n == 0 {
		return
	}
	if s.Moved == nil {
		s.Moved = map[string]int{}
	}
	s.Moved[id] += n
}

// sweepError is a sweep's error: the errors of its moves, or, when it
// left orphans only for want of a slave, ErrNoSlaves naming them.
func sweepError(orphans []string, errs []error) error {
	if len(orphans) > 0 && len(errs) == 0 {
		return fmt.Errorf("sweep: the inboxes of %q: %w", orphans, ErrNoSlaves)
	}
	return errors.Join(errs...)
}

// sweepChunk is the most inboxes one inbox_adopt call walks.
const sweepChunk = 128

// adopt walks every inbox but this process's own once with inbox_adopt.lua
// under term, adopting (or dropping) the entries of older terms, and
// returns the processes that are not live whose inboxes still exist, and
// whether this process's own inbox is listed.
func (r *Router) adopt(ctx context.Context, term int64) (res Swept, gone []string, own bool, err error) {
	res = Swept{Term: term}
	ids, err := r.client.SMembers(ctx, r.keys.Inboxes).Result()
	if err != nil {
		return res, nil, false, fmt.Errorf("sweep: list the inboxes (%q): %w", r.keys.Inboxes, err)
	}
	slices.Sort(ids)
	res.Inboxes = len(ids)
	self := r.mastership.NodeID()
	own = slices.Contains(ids, self)
	// This process's own inbox is not adopted but moved to the slaves, by
	// Sweep: adopted in place, its entries would be this term's and read by
	// its own Consumer, if any, while a sweep moves them.
	todo := slices.DeleteFunc(ids, func(id string) bool { return id == self || route.CheckName("process id", id) != nil })
	a := adoption{res: &res, drop: r.cfg.DropBacklog, known: map[string]bool{}}
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), sweepChunk)]
		res.Calls++
		states, err := rdb.InboxAdopt(ctx, r.client, r.keys, self, term, keyspace.InboxGroup, a.mode(), r.cfg.ReassignBatch, r.deadlines(), chunk)
		if err != nil {
			return res, a.gone, own, fmt.Errorf("sweep: %w", err) // matches ErrNotMaster too when fenced
		}
		a.again = nil
		for i, st := range states {
			if st.Live {
				r.waits.sawLive(chunk[i])
			}
			a.record(chunk[i], st)
		}
		todo = append(a.again, todo[len(chunk):]...)
	}
	r.waits.keep(a.known)
	return res, a.gone, own, nil
}

// adoption is adopt's walk over the inboxes: what each inbox_adopt call
// found, inbox by inbox.
type adoption struct {
	res   *Swept
	drop  bool            // Config.DropBacklog: the old entries are deleted, not adopted
	known map[string]bool // the inboxes that still exist, their process live or not
	gone  []string        // the processes not live whose inboxes still exist
	again []string        // the inboxes of the last call with entries left to adopt
}

// mode is the inbox_adopt mode of the walk.
func (a *adoption) mode() rdb.AdoptMode {
	if a.drop {
		return rdb.AdoptDrop
	}
	return rdb.AdoptKeep
}

// record counts the state st of the inbox of id after a call: the entries
// taken, and whether the inbox is walked again (more to adopt), is gone,
// or remains.
func (a *adoption) record(id string, st rdb.InboxState) {
	a.res.taken(st, a.drop)
	switch {
	case st.More:
		a.again = append(a.again, id)
	case st.Gone:
		if !st.Live {
			a.res.Deleted++
		}
	default:
		a.known[id] = true
		if !st.Live {
			a.gone = append(a.gone, id)
		}
	}
}

// taken counts the entries one inbox_adopt call took from an inbox:
// adopted, or dropped with Config.DropBacklog, and the malformed ones.
func (s *Swept) taken(st rdb.InboxState, drop bool) {
	if drop {
		s.Dropped += st.Taken
	} else {
		s.Adopted += st.Taken
	}
	s.Malformed += st.Malformed
}

// takeOver runs the adoption step of a sweep once per term, before this
// master's first send under it, so its entries come after the adopted ones.
func (r *Router) takeOver(ctx context.Context, term int64) error {
	if r.backlog.term.Load() == term {
		return nil
	}
	// One adoption at a time; a sender waiting for another's gives up
	// with its own ctx.
	if err := r.backlog.await(ctx); err != nil {
		return fmt.Errorf("take over the inboxes of the earlier masters: %w", err)
	}
	defer func() { <-r.backlog.turn }()
	if r.backlog.term.Load() == term {
		return nil
	}
	res, _, _, err := r.adopt(ctx, term)
	if err != nil {
		return fmt.Errorf("take over the inboxes of the earlier masters: %w", err)
	}
	r.backlog.done(term)
	if res.changed() {
		r.cfg.swept(res)
	}
	return nil
}

// backlog records the last term whose adoption step ran to its end.
type backlog struct {
	turn chan struct{} // one slot: serialises the adoption step of takeOver
	term atomic.Int64
}

// await takes the turn to run an adoption step, waiting while another
// sender's runs, or returns ctx's error; the taker gives the turn back by
// receiving from turn.
func (b *backlog) await(ctx context.Context) error {
	select {
	case b.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// done records that the adoption step of term ran to its end.
func (b *backlog) done(term int64) { atomicmax.Raise(&b.term, term) }
