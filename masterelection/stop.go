package masterelection

import "context"

// stopRequest is Stop's request that the election loop end the mastership
// before anything of the election stops (resignFirst).
type stopRequest struct {
	ctx  context.Context // Stop's: bounds the wait for the handlers and the release
	err  error           // the resignation's error; written before done closes
	done chan struct{}   // closed when the loop has handled the request
}

// resignFirst has the election loop resign a master's mastership (cancel
// the handlers' ctx, wait for them, release the lock, emit master-lost)
// before Stop tears anything down, so that the slave that takes over on the
// release notice does so while this process stops its loops, its
// subscription and its slave tracker, not after (docs/performance.md, row
// 4). It returns the resignation's error. When the loop has returned, or is
// not master by the time it reads the request, there is nothing to resign
// here; Stop resigns after the loop has stopped whatever mastership is
// left, as it always did.
func (m *MasterElection) resignFirst(ctx context.Context) error {
	req := &stopRequest{ctx: ctx, done: make(chan struct{})}
	select {
	case m.stops <- req:
	case <-m.done:
		return nil
	case <-ctx.Done():
		return nil // Stop reports its ctx's end while waiting for the loop
	}
	<-req.done // the resignation is bounded by ctx
	return req.err
}

// stopAsMaster handles Stop's request on the lead loop: it stops the
// membership loop, resigns mastership l, releasing the lock, and tells run
// to return.
func (m *MasterElection) stopAsMaster(ls *loopState, l *leadership, req *stopRequest) {
	// No registry write may follow the release: one as master would be
	// refused and written as a slave, one as slave (the role change) would
	// tell the new master that a slave joined just before Stop unregisters
	// it. The loop is idle between heartbeats, so this rarely waits.
	ls.haltMembership()
	released, err := m.resign(req.ctx, l, 0, "stopped", "", 0)
	if released {
		ls.lockGone()
	}
	ls.stopped = true
	req.err = err
	close(req.done)
}
