package masterelection

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// subscription is the election's subscription to its events channel (and
// control channel), made by Start while the rest of Start goes on.
type subscription struct {
	ps *redis.PubSub
	// ready is closed when the subscription is confirmed by the server or
	// its attempts have failed (then go-redis keeps subscribing again by
	// itself once listen reads ps, and polling covers the gap); confirmed
	// is closed only in the first case, before ready.
	ready, confirmed chan struct{}
	cancel           context.CancelFunc // ends the attempts
}

// close ends the attempts, closes the subscription and waits for the
// goroutine that made it.
func (s *subscription) close() {
	s.cancel()
	_ = s.ps.Close()
	<-s.ready
}

// prepare does what Start needs before the election loop runs: it opens
// the process registry (membership and slave tracking need it from the
// first election on), reads the eviction policy and refuses a lock key that
// holds garbage, and it subscribes to the events channel. None of these
// needs another's answer, so their round trips go out at once; the
// subscription, which dials a connection of its own, goes on while the loop
// makes its first attempt (follow checks the lock again if that attempt
// was answered before the subscription was in place, and Start returns
// only once it is). Start thus waits for the slowest of them, not for
// their sum (docs/performance.md, row 3s). What Redis did not answer at
// first (it was unreachable while the registry's probe kept retrying) is
// asked again once the registry is open, so a Redis that comes up late
// gets the same checks as one that was there all along. runCtx ends when
// Stop is called.
//
// The subscription is returned for run; on an error Start fails, and
// every goroutine prepare started has returned.
func (m *MasterElection) prepare(ctx, runCtx context.Context) (*subscription, error) {
	openCtx, stopOpen := context.WithCancel(ctx)
	defer stopOpen()
	go func() {
		select {
		case <-runCtx.Done(): // Stop while Start waits
			stopOpen()
		case <-openCtx.Done():
		}
	}()

	opened := make(chan struct{}) // the registry is open: Redis answers
	sub := m.subscribe(runCtx, opened)
	var (
		wg       sync.WaitGroup
		eviction evictionRead
		garbage  error
		answered bool
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		eviction = m.readEviction(openCtx)
	}()
	go func() {
		defer wg.Done()
		garbage, answered = m.garbageLock(openCtx)
	}()
	reg, err := m.openRegistry(openCtx)
	wg.Wait()
	if err != nil {
		sub.close()
		return nil, err
	}
	close(opened)
	m.mu.Lock()
	m.reg = reg
	m.mu.Unlock()

	if eviction.err != nil && !eviction.refused() {
		eviction = m.readEviction(openCtx)
	}
	m.reportEviction(eviction)
	if !answered {
		garbage, _ = m.garbageLock(openCtx)
	}
	if garbage != nil { // no election can work on this lock
		sub.close()
		return nil, garbage
	}
	return sub, nil
}
