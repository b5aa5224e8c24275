package masterelection

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/rdb"
)

// A renewal whose request or reply is lost must not cost the mastership
// when Redis answers again before the deadline: the loop does not wait for
// the lost attempt, it sends another one.
func TestLostRenewalIsRetriedBeforeTheDeadline(t *testing.T) {
	tests := []struct {
		name string
		mode faultMode
	}{
		{"request lost", faultDrop},
		{"reply lost", faultDropReply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			renewals := newScriptFault(rdb.RenewSHA, nil)
			a := w.nodeWith(testConfig("a"), renewals)
			w.start(a)
			a.rec.waitEvents(t, "started", "acquired", "completed:master")
			term := a.Term()
			// LockTTL 3s, HeartbeatInterval 1s, StepDownMargin 0.3s: the
			// deadline is 2.7s after the acquire. Every renewal sent in the
			// first 1.3s is lost (the one due at 1s), later ones get through.
			renewals.set(tt.mode, -1)
			w.advance(1300*time.Millisecond, 50*time.Millisecond, a)
			if renewals.faulted() == 0 {
				t.Fatal("no renewal was sent while the fault lasted")
			}
			renewals.set(faultNone, 0)
			for range 60 { // 3s, past the first deadline
				w.advance(50*time.Millisecond, 50*time.Millisecond, a)
				if a.Term() != term {
					t.Fatalf("at %v: term %d, want %d still (the deadline without renewals was 2.7s)", a.clk.Now().Sub(epoch), a.Term(), term)
				}
			}
			a.rec.waitEvents(t, "started", "acquired", "completed:master")
			if ttl := w.mr.TTL(a.Keys().Master); ttl <= 0 {
				t.Fatalf("lock TTL %v: not renewed", ttl)
			}
		})
	}
}

// A renewal that succeeds moves the deadline to its own send time plus
// LockTTL minus StepDownMargin, not to when its reply came.
func TestDeadlineCountsFromTheSendOfTheRenewal(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	l := a.core.mastership.Load()
	want := a.cfg.HeartbeatInterval + a.cfg.LockTTL - a.cfg.StepDownMargin
	// The master loop arms its renew timer just after the election completes:
	// let it, or a timer armed after the step below would not fire in it.
	for quiet := false; !quiet; {
		select {
		case <-a.clk.Changed():
		case <-time.After(50 * time.Millisecond):
			quiet = true
		}
	}
	// One step, then no more time until the reply: with smaller steps a
	// slow reply (a busy machine) lets HeartbeatInterval/2 pass and a
	// second attempt go out, whose later send time sets the deadline.
	w.advance(a.cfg.HeartbeatInterval, a.cfg.HeartbeatInterval, a) // one renewal, sent at 1s
	if !waitUntil(5*time.Second, func() bool { return time.Duration(l.deadline.Load()) == want }) {
		t.Fatalf("deadline after the renewal sent at %v: %v, want %v (events %v)", a.cfg.HeartbeatInterval, time.Duration(l.deadline.Load()), want, a.rec.errors())
	}
	w.mr.SetError("LOADING simulated outage") // no more renewals
	a.clk.Advance(want - a.cfg.HeartbeatInterval - time.Millisecond)
	if !a.IsMaster() {
		t.Fatalf("not master 1ms before %v", want)
	}
	a.clk.Advance(time.Millisecond)
	if a.IsMaster() {
		t.Fatalf("master at %v, the deadline of the renewal sent at 1s", want)
	}
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
}

// Redis refusing every renewal: the master retries until its deadline and
// steps down there, never later; every attempt is reported.
func TestFailingRenewalsStepDownAtTheDeadline(t *testing.T) {
	w := newWorld(t)
	renewals := newScriptFault(rdb.RenewSHA, errors.New("injected: connection refused"))
	a := w.nodeWith(testConfig("a"), renewals)
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	term := a.Term()
	renewals.set(faultFail, -1)
	deadline := a.cfg.LockTTL - a.cfg.StepDownMargin
	w.advance(deadline-time.Millisecond, 10*time.Millisecond, a)
	if a.Term() != term {
		t.Fatal("stepped down before the deadline")
	}
	// At the deadline the mastership ends (the node may be elected again at
	// once, under a new term: only renewals fail).
	w.advance(time.Millisecond, time.Millisecond, a)
	if a.Term() == term {
		t.Fatal("still master under the same term past the deadline")
	}
	a.rec.waitPrefix(t, "started", "acquired", "completed:master", "lost")
	// Retries came quickly (at most HeartbeatInterval/2 apart), not one per
	// heartbeat: between 1s and 2.7s at least four.
	if n := renewals.faulted(); n < 4 {
		t.Fatalf("%d renewal attempts before the deadline, want retries", n)
	}
	for _, err := range a.rec.errors() {
		if !strings.Contains(err.Error(), "renew master lock") {
			t.Fatalf("unexpected error event %v", err)
		}
	}
}

// Start's error names why the first election could not finish, and still
// matches ctx's error.
func TestStartErrorNamesTheCause(t *testing.T) {
	tests := []struct {
		name  string
		fault func(w *world) *peer
		want  string
	}{
		{
			name: "acquire refused",
			fault: func(w *world) *peer {
				acquires := newScriptFault(rdb.AcquireRegisterSHA, errors.New("NOPERM this user has no permissions to run the 'publish' command"))
				acquires.set(faultFail, -1)
				return w.nodeWith(testConfig("a"), askAlone{}, acquires)
			},
			want: "NOPERM",
		},
		{
			name: "redis loading",
			fault: func(w *world) *peer {
				w.mr.SetError("LOADING simulated outage")
				return w.node(testConfig("a"))
			},
			want: "LOADING",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			a := tt.fault(w)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			go func() {
				for ctx.Err() == nil { // retries run on the fake clock
					a.clk.Advance(50 * time.Millisecond)
					time.Sleep(5 * time.Millisecond)
				}
			}()
			err := a.Start(ctx)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start = %v, want deadline exceeded naming %s", err, tt.want)
			}
		})
	}
}

// A lock found under this process's node id after one of its acquires lost
// its reply may be its own or a twin's (another process with the same
// NodeID). It is left to expire either way; it is reported as a duplicate
// NodeID when it certainly is a twin's, and never when it may be ours.
func TestLockAfterALostAcquireReply(t *testing.T) {
	tests := []struct {
		name string
		// twin runs a master with our NodeID and returns it, or nil.
		twin func(w *world) *peer
		// want is what the duplicate report must say; "" for none.
		want string
		// mode is how the first acquire's reply is lost.
		mode faultMode
	}{
		{
			name: "our own lock",
			mode: faultFailReply,
		},
		{
			// go-redis (MaxRetries >= 0) sends the call again after a lost
			// reply; the retry finds the lock the first run took.
			name: "our own lock found by the client's retry",
			mode: faultRetried,
		},
		{
			name: "twin elected earlier",
			twin: func(w *world) *peer {
				x := w.node(testConfig("a"))
				w.start(x)
				w.advance(300*time.Millisecond, 50*time.Millisecond, x) // our info will differ from its
				return x
			},
			want: "master_process was written by an acquire that this process did not send",
			mode: faultFailReply,
		},
		{
			name: "twin with the same info",
			twin: func(w *world) *peer {
				x := w.node(testConfig("a"))
				w.start(x) // at the same clock reading as ours: same master_process
				return x
			},
			want: "the lock was renewed",
			mode: faultFailReply,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			var x *peer
			if tt.twin != nil {
				x = tt.twin(w)
			}
			// Start's first acquire: with its questions (rdb.AskTaking), or
			// alone when its process's id has an entry (a twin's).
			first := rdb.TakeSHA
			if tt.twin != nil {
				first = rdb.AcquireRegisterSHA
			}
			acquires := newScriptFault(first, errors.New("injected: connection reset by peer"))
			acquires.set(tt.mode, 1) // the first acquire runs; its reply is lost
			y := w.nodeWith(testConfig("a"), acquires)
			nodes := []*peer{y}
			if x != nil {
				// A twin the registry cannot tell apart (one incarnation,
				// as a program that copies it would have): only the lock
				// tells, which is what this test checks. Twins of their own
				// incarnations are refused earlier (twins_test.go).
				y.incarnation = x.incarnation
				nodes = append(nodes, x)
			}
			// Start retries after the lost reply: time must move meanwhile.
			started := make(chan error, 1)
			go func() { started <- y.Start(context.Background()) }()
			waitFor(t, "y's first acquire", func() bool { return acquires.faulted() == 1 })
			w.until(func() bool { return len(started) > 0 }, 2*time.Second, 10*time.Millisecond, "y started", nodes...)
			if err := <-started; err != nil {
				t.Fatal(err)
			}
			if acquires.faulted() != 1 {
				t.Fatalf("%d acquire replies lost, want 1", acquires.faulted())
			}
			duplicate := func() error {
				for _, err := range y.rec.errors() {
					if errors.Is(err, ErrDuplicateNodeID) {
						return err
					}
				}
				return nil
			}
			if tt.want == "" {
				// Ours: never reported, listed as slave when Start returns
				// (the lost call registered y as master under the term it
				// minted), left to expire, then won again under a new term.
				if v := w.mr.HGet(y.keys.Processes, "a"); y.IsMaster() || !strings.Contains(v, `"role":"slave"`) {
					t.Fatalf("after Start: y master %v, entry %s; want y slave and listed so", y.IsMaster(), v)
				}
				lost, _ := w.mr.Get(y.Keys().Term)
				if holder, _ := w.mr.Get(y.Keys().Master); holder != "a" {
					t.Fatalf("lock held by %q after the lost reply, want ours", holder)
				}
				w.until(y.IsMaster, 5*time.Second, 50*time.Millisecond, "y master after its lock expired", nodes...)
				if err := duplicate(); err != nil {
					t.Fatalf("our own lock reported: %v", err)
				}
				if got := fmt.Sprint(y.Term()); got == lost {
					t.Fatalf("y master under the term of the lost reply %s: want the lock left to expire", lost)
				}
				return
			}
			w.until(func() bool { return duplicate() != nil }, 2*time.Second, 50*time.Millisecond, "duplicate reported", nodes...)
			if err := duplicate(); !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("report %q does not say %q", err, tt.want)
			}
			if y.IsMaster() || !x.IsMaster() {
				t.Fatalf("twin master %v, y master %v", x.IsMaster(), y.IsMaster())
			}
		})
	}
}

// TestDeadlineLatches checks that once holds has said a mastership is over,
// a renewal that comes back afterwards cannot make it current again, and
// that a renewal only ever moves the deadline forward.
func TestDeadlineLatches(t *testing.T) {
	clk := clock.NewFake(epoch)
	l := &mastership{clock: clk, base: clk.Now()}
	l.deadline.Store(int64(time.Second))

	if !l.extend(3*time.Second) || !l.holds(clk.Now().Add(2*time.Second)) {
		t.Fatal("a renewal before the deadline did not extend it")
	}
	if !l.extend(2*time.Second) || l.remaining(clk.Now()) != 3*time.Second {
		t.Fatalf("an older renewal moved the deadline back to %v", l.remaining(clk.Now()))
	}
	clk.Advance(3 * time.Second)
	if l.holds(clk.Now()) {
		t.Fatal("holds at the deadline")
	}
	if l.extend(10 * time.Second) {
		t.Fatal("a renewal after holds said false extended the mastership")
	}
	if l.holds(clk.Now()) || l.holds(epoch) {
		t.Fatal("the mastership came back after it was reported over")
	}
}

// TestDataLossWaitPerLoss: after a data loss a process that has seen a term
// waits LockTTL before contending; a second loss after a master was elected
// (its term learnt from a notice, with no check seeing the key in between)
// starts a new wait instead of reusing the expired one.
func TestDataLossWaitPerLoss(t *testing.T) {
	w := newWorld(t)
	n := w.node(testConfig("a"))
	ttl := n.cfg.LockTTL
	ls := &loopState{}
	n.noteTerm(7)
	if d := n.core.dataLossWait(ls, true); d <= 0 {
		t.Fatalf("first sight of a loss: wait %v, want up to LockTTL", d)
	}
	n.clk.Advance(ttl)
	if d := n.core.dataLossWait(ls, true); d != 0 {
		t.Fatalf("LockTTL after the loss: wait %v, want 0 (contend)", d)
	}
	n.noteTerm(9) // elected after the loss, learnt from its notice
	n.clk.Advance(time.Millisecond)
	if d := n.core.dataLossWait(ls, true); d <= 0 {
		t.Fatalf("a second loss after term 9 was elected: wait %v, want a new wait", d)
	}
	losses := func() int {
		k := 0
		for _, err := range n.rec.errors() {
			if errors.Is(err, ErrDataLoss) {
				k++
			}
		}
		return k
	}
	waitFor(t, "two data-loss errors", func() bool { return losses() >= 2 })
	if k := losses(); k != 2 {
		t.Errorf("%d data-loss errors reported, want one per loss (2)", k)
	}
}

// waitUntil polls cond for up to d of real time.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// TestOwnLockAfterTermLossIsNoTwin: when the term key vanishes under a
// master (a data loss, an eviction), its renewal fails and its next check
// finds its own lock without a term: that is a data loss, never reported as
// a duplicate NodeID.
func TestOwnLockAfterTermLossIsNoTwin(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	w.mr.Del(a.Keys().Term)
	w.until(func() bool { return !a.IsMaster() }, 2*time.Second, 100*time.Millisecond, "a steps down", a)
	// Several checks find the lock still there, until it expires and the
	// data loss shows.
	w.advance(a.cfg.LockTTL+a.cfg.CheckInterval, 100*time.Millisecond, a)
	var loss bool
	for _, err := range a.rec.errors() {
		if errors.Is(err, ErrDuplicateNodeID) {
			t.Fatalf("own lock after the term key was lost reported as a twin: %v", err)
		}
		loss = loss || errors.Is(err, ErrDataLoss)
	}
	if !loss {
		t.Errorf("no ErrDataLoss reported; errors: %v", a.rec.errors())
	}
}

// TestNoticeCheckDuringLossWaitIsImmediate: the check an acquired notice
// sets off is spread over CheckInterval/noticeCheckSpread, except while the
// slave waits out a data loss: then it checks at once, so that a master
// elected since the loss is known before a second loss (a wait reused
// across that master let two act at once in a soak schedule).
func TestNoticeCheckDuringLossWaitIsImmediate(t *testing.T) {
	w := newWorld(t)
	n := w.node(testConfig("a"))
	spread := n.cfg.CheckInterval / noticeCheckSpread
	ls := &loopState{}
	for range 100 {
		if d := n.core.noticeCheckDelay(ls); d < 0 || d > spread {
			t.Fatalf("delay %v, want within [0, %v]", d, spread)
		}
	}
	n.noteTerm(7)
	if d := n.core.dataLossWait(ls, true); d <= 0 {
		t.Fatalf("a loss: wait %v, want one", d)
	}
	for range 100 {
		if d := n.core.noticeCheckDelay(ls); d != 0 {
			t.Fatalf("while waiting out a data loss: delay %v, want 0", d)
		}
	}
}
