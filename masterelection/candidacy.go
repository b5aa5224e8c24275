package masterelection

import (
	"context"
	"fmt"
	"time"
)

// SetCandidate pauses (false) or resumes (true) this process's candidacy
// at run time, as the "paused elector" does. A paused process keeps
// following the election but never contends. A master that is paused hands
// over gracefully: its OnMasterAcquired handlers' ctx is cancelled, they get
// up to one HeartbeatInterval to return, then the lock is released and a
// slave takes over at once. A resumed process contends as soon as it finds
// the lock free. It has no effect in standalone mode.
func (m *MasterElection) SetCandidate(candidate bool) {
	if m.candidate.Swap(candidate) == candidate {
		return
	}
	select {
	case m.candidacy <- struct{}{}:
	default: // a change is already pending; the loop reads the latest value
	}
}

// Candidate reports whether this process contends for mastership.
func (m *MasterElection) Candidate() bool { return m.candidate.Load() }

// RunIfMaster runs fn if this process is master, and reports whether it
// did. fn's ctx is done when ctx ends or the mastership ends, whichever
// comes first, and never later than IsMaster turns false (its Err reads the
// self-fencing deadline itself); term is the mastership's fencing term, to stamp on what fn
// writes. When this process is not master, fn is not called and RunIfMaster
// returns false and ErrNotMaster.
func (m *MasterElection) RunIfMaster(ctx context.Context, fn func(ctx context.Context, term int64) error) (ran bool, err error) {
	l := m.lead.Load()
	if l == nil || !m.holds(l, m.clock.Now()) {
		return false, ErrNotMaster
	}
	fctx := m.newMasterCtx(ctx, l)
	defer fctx.cancel()
	if err := fn(fctx, l.term); err != nil {
		return true, fmt.Errorf("masterelection: run as master (term %d): %w", l.term, err)
	}
	return true, nil
}

// runStandalone is run in standalone mode: master at once, until Stop.
func (m *MasterElection) runStandalone(ctx context.Context) {
	m.bus.emit(topicElectionStarted, payload{})
	term := m.clock.Now().UnixMilli()
	l := m.newLeadership(ctx, term, time.Duration(^uint64(0)>>1)) // never: nothing can take it away
	m.observeTerm(term)
	m.lead.Store(l)
	m.bus.emit(topicMasterAcquired, payload{term: term, lead: l})
	m.bus.emit(topicElectionCompleted, payload{isMaster: true})
	close(m.resolved)
	<-ctx.Done()
}
