package masterelection

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// observed keeps what an Observer was given.
type observed struct {
	mu        sync.Mutex
	renewals  []RenewAttempt
	stepDowns []StepDown
	elections []ElectionResult
}

func observe(m *MasterElection) (*observed, func()) {
	o := &observed{}
	remove := m.Observe(Observer{
		RenewDone: func(a RenewAttempt) {
			o.mu.Lock()
			o.renewals = append(o.renewals, a)
			o.mu.Unlock()
		},
		SteppedDown: func(s StepDown) {
			o.mu.Lock()
			o.stepDowns = append(o.stepDowns, s)
			o.mu.Unlock()
		},
		ElectionDone: func(r ElectionResult) {
			o.mu.Lock()
			o.elections = append(o.elections, r)
			o.mu.Unlock()
		},
	})
	return o, remove
}

func (o *observed) snapshot() ([]RenewAttempt, []StepDown, []ElectionResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.renewals), slices.Clone(o.stepDowns), slices.Clone(o.elections)
}

// count counts the renew attempts with result r.
func (o *observed) count(r RenewResult) int {
	renewals, _, _ := o.snapshot()
	n := 0
	for _, a := range renewals {
		if a.Result == r {
			n++
		}
	}
	return n
}

// Each way a mastership ends reaches SteppedDown once, with its reason and
// term, and the renew attempts before it reach RenewDone with their result.
func TestObserverSeesRenewalsAndStepDowns(t *testing.T) {
	tests := []struct {
		name  string
		end   func(w *world, a *peer)
		want  StepDownReason
		renew RenewResult // a result the attempts before the end had
	}{
		{"self-fenced", func(w *world, a *peer) {
			w.mr.SetError("LOADING simulated outage")
			w.until(func() bool { return !a.IsMaster() }, a.cfg.LockTTL, 100*time.Millisecond, "a fences itself", a)
		}, StepDownSelfFenced, RenewFailed},
		{"lock lost", func(w *world, a *peer) {
			w.mr.Set(a.Keys().Master, "intruder")
			w.mr.SetTTL(a.Keys().Master, time.Minute)
			w.until(func() bool { return !a.IsMaster() }, 2*time.Second, 100*time.Millisecond, "a steps down", a)
		}, StepDownLockLost, RenewLockLost},
		{"handed over", func(w *world, a *peer) { a.SetCandidate(false) }, StepDownHandedOver, RenewRenewed},
		{"stopped", func(w *world, a *peer) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		}, StepDownStopped, RenewRenewed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			a := w.node(testConfig("a"))
			obs, _ := observe(a.MasterElection)
			w.start(a)
			a.rec.waitEvents(t, "started", "acquired", "completed:master")
			term := a.Term()
			w.until(func() bool { return obs.count(RenewRenewed) > 0 }, 3*a.cfg.HeartbeatInterval, 100*time.Millisecond, "a renewal observed", a)

			tc.end(w, a)
			waitFor(t, "the step-down observed", func() bool { _, s, _ := obs.snapshot(); return len(s) > 0 })
			renewals, stepDowns, elections := obs.snapshot()
			if len(stepDowns) != 1 || stepDowns[0].Reason != tc.want || stepDowns[0].Term != term || stepDowns[0].Detail == "" {
				t.Fatalf("step-downs %+v, want one %s of term %d", stepDowns, tc.want, term)
			}
			if obs.count(tc.renew) == 0 {
				t.Fatalf("renewals %+v, want one %s", renewals, tc.renew)
			}
			for _, r := range renewals {
				if r.Term != term || (r.Result == RenewFailed) != (r.Err != nil) {
					t.Fatalf("renewal %+v of mastership %d", r, term)
				}
			}
			if len(elections) != 1 || !elections[0].IsMaster || elections[0].Duration != 0 {
				t.Fatalf("elections %+v, want one won at once (no fake time passed)", elections)
			}
		})
	}
}

// A Transfer ends the mastership with the reason transferred.
func TestObserverSeesATransfer(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	obs, _ := observe(a.MasterElection)
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")
	term := a.Term()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Transfer(ctx, "b") }()
	waitFor(t, "b takes over", b.IsMaster)
	var err error
	w.until(func() bool { // at b's acquired notice, or a poll on a's clock
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	}, time.Second, 10*time.Millisecond, "Transfer returns", a)
	if err != nil {
		t.Fatalf("Transfer: %v", err)
	}
	if _, stepDowns, _ := obs.snapshot(); len(stepDowns) != 1 || stepDowns[0].Reason != StepDownTransferred || stepDowns[0].Term != term {
		t.Fatalf("step-downs %+v, want one transferred of term %d", stepDowns, term)
	}
}

// ElectionDone gets each election's outcome and its duration on the
// election's clock; a removed Observer gets nothing more.
func TestObserverTimesElections(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	bo, remove := observe(b.MasterElection)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")

	_, _, elections := bo.snapshot()
	if len(elections) != 1 || elections[0].IsMaster {
		t.Fatalf("b's elections %+v, want one lost", elections)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b.rec.waitEvents(t, "started", "completed:slave", "started", "acquired", "completed:master")
	_, _, elections = bo.snapshot()
	if len(elections) != 2 || !elections[1].IsMaster {
		t.Fatalf("b's elections %+v, want a lost one and a won one", elections)
	}

	remove()
	remove() // idempotent
	b.SetCandidate(false)
	b.rec.waitEvents(t, "started", "completed:slave", "started", "acquired", "completed:master", "lost")
	if _, stepDowns, _ := bo.snapshot(); len(stepDowns) != 0 {
		t.Fatalf("a removed Observer saw %+v", stepDowns)
	}
}

// An election's duration is the time between its events on its clock.
func TestElectionDurationFollowsTheClock(t *testing.T) {
	var obs observers
	now := epoch
	obs.add(&Observer{ElectionDone: func(r ElectionResult) {
		if r.Duration != 250*time.Millisecond || r.IsMaster {
			t.Errorf("election %+v, want lost after 250ms", r)
		}
	}}, func() time.Time { return now })
	obs.event(topicElectionStarted, payload{})
	now = now.Add(250 * time.Millisecond)
	obs.event(topicElectionCompleted, payload{isMaster: false})
	// A completion without a start seen (the Observer came later) is not timed.
	obs.event(topicElectionCompleted, payload{isMaster: true})
}

// The words the loop gives endMastership map to their reasons.
func TestStepDownReasons(t *testing.T) {
	tests := []struct {
		detail string
		want   StepDownReason
	}{
		{"self-fencing deadline passed without a successful renewal", StepDownSelfFenced},
		{"self-fencing deadline passed before a renewal's reply", StepDownSelfFenced},
		{"lock no longer held by this node and term", StepDownLockLost},
		{"no longer a candidate: handed over", StepDownHandedOver},
		{"transferred to b", StepDownTransferred},
		{"transferred: stepped down", StepDownTransferred},
		{"stopped", StepDownStopped},
		{"something new", StepDownOther},
	}
	for _, tc := range tests {
		if got := stepDownReason(tc.detail); got != tc.want {
			t.Errorf("stepDownReason(%q) = %s, want %s", tc.detail, got, tc.want)
		}
	}
}

// Status follows the lifecycle: not running before Start, running and
// resolved after it, not running (still resolved) after Stop.
func TestStatus(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	if st := a.Status(); st.Running || st.Resolved || st.IsMaster || !st.Candidate {
		t.Fatalf("before Start: %+v", st)
	}
	w.start(a)
	st := a.Status()
	if !st.Running || !st.Resolved || !st.IsMaster || st.Term == 0 || st.ObservedTerm != st.Term {
		t.Fatalf("after Start: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.Status(); st.Running || !st.Resolved || st.IsMaster || st.Term != 0 {
		t.Fatalf("after Stop: %+v", st)
	}
}

// Transfer returns at its successor's acquired notice: it asks Redis again
// when the notice comes, not at the next tick of its own clock, which this
// test never advances.
func TestTransferReturnsAtTheSuccessorsNotice(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Transfer(ctx, "b") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Transfer: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Transfer had not returned 3s (real time) after it was called, with no fake time passing")
	}
	// Transfer returns once Redis shows b master (its acquired notice
	// may reach a before b has read its own acquire's reply): b turns
	// master on that reply, with no fake time passing either.
	for deadline := time.Now().Add(3 * time.Second); !b.IsMaster(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Transfer returned, but b was not master 3s (real time) later")
		}
	}
}
