package masterelection

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Observer receives measurements of the election's internals that its
// events do not carry: every renew attempt with its latency and result, the
// reason of every step-down, and how long every election took. It is meant
// for metrics (package metrics builds its Prometheus metrics on it, and on
// the events); add one with MasterElection.Observe. It adds no dependency
// and costs nothing while no Observer is added.
//
// Every field may be nil. The functions are called synchronously on the
// election's own goroutines, so they must return quickly, must not block or
// panic, and must not call Stop, SetCandidate or Transfer; reading the
// election (IsMaster, Term, …) is fine. RenewDone may run on several
// goroutines at once (renew attempts overlap); SteppedDown and
// ElectionDone are called one at a time, in the order things happened.
type Observer struct {
	// RenewDone is called once per renew attempt of the master, when its
	// answer (or error) has come back.
	RenewDone func(RenewAttempt)
	// SteppedDown is called once per mastership that ends, right before
	// master-lost is emitted.
	SteppedDown func(StepDown)
	// ElectionDone is called once per election-completed event, right
	// before the event is emitted, with the time since the election-started
	// event of that election. Elections that started before the Observer
	// was added are not reported.
	ElectionDone func(ElectionResult)
}

// RenewResult is the result of one renew attempt. Its values are short
// snake_case words, fit for a metric label.
type RenewResult string

// The results of a renew attempt.
const (
	// RenewRenewed: Redis extended the lock.
	RenewRenewed RenewResult = "renewed"
	// RenewLockLost: Redis answered that the lock is no longer this
	// process's under its term; the mastership ends.
	RenewLockLost RenewResult = "lock_lost"
	// RenewFailed: the attempt got no answer (a network error, a timeout,
	// too few replicas, a refusal); another attempt follows until the
	// self-fencing deadline.
	RenewFailed RenewResult = "error"
	// RenewAbandoned: the attempt failed after its mastership had ended
	// (Stop, a hand-over, the deadline); nothing depended on it any more.
	RenewAbandoned RenewResult = "abandoned"
)

// RenewAttempt describes one renew attempt, for Observer.RenewDone.
type RenewAttempt struct {
	// Term is the term of the mastership the attempt renewed.
	Term int64
	// Latency is the time from sending the renew script to its answer or
	// error, on the election's clock.
	Latency time.Duration
	// Result says what came of the attempt.
	Result RenewResult
	// Err is the error of a failed or abandoned attempt, else nil.
	Err error
}

// StepDownReason classifies why a mastership ended. Its values are short
// snake_case words, fit for a metric label.
type StepDownReason string

// The reasons a mastership ends.
const (
	// StepDownSelfFenced: the self-fencing deadline passed without a
	// successful renewal (Redis unreachable or too slow, the process paused).
	StepDownSelfFenced StepDownReason = "self_fenced"
	// StepDownLockLost: a renewal found that the lock is no longer this
	// process's under its term (it expired and was taken, or was deleted).
	StepDownLockLost StepDownReason = "lock_lost"
	// StepDownHandedOver: SetCandidate(false) made the master hand over.
	StepDownHandedOver StepDownReason = "handed_over"
	// StepDownTransferred: a Transfer (local or remote) made the master
	// hand over.
	StepDownTransferred StepDownReason = "transferred"
	// StepDownStopped: Stop released the lock.
	StepDownStopped StepDownReason = "stopped"
	// StepDownOther: any other reason; StepDown.Detail says which.
	StepDownOther StepDownReason = "other"
)

// StepDown describes the end of one mastership, for Observer.SteppedDown.
type StepDown struct {
	// Term is the term of the mastership that ended.
	Term int64
	// Reason classifies why it ended.
	Reason StepDownReason
	// Detail is the reason in words, as the election logs it.
	Detail string
}

// ElectionResult describes one election, from election-started to
// election-completed, for Observer.ElectionDone.
type ElectionResult struct {
	// IsMaster is the outcome: this process became master.
	IsMaster bool
	// Duration is the time from election-started to election-completed on
	// the election's clock: usually one acquire round trip; longer when
	// Redis errors were retried or a data loss was waited out.
	Duration time.Duration
}

// observers is the list of Observers of one election. It lives in the bus,
// whose emit hands it every event (see event); the other calls come from
// the loop's call sites (observeRenew, observeStepDown).
type observers struct {
	mu  sync.Mutex // serialises add and remove
	set atomic.Pointer[observerSet]

	// electionStart is when the election in progress started; zero when
	// none is in progress or it started with no Observer. Only event
	// touches it, and emit calls event under bus.emitMu.
	electionStart time.Time
}

// observerSet is one immutable version of the list.
type observerSet struct {
	list []*Observer
	now  func() time.Time // the election's clock
}

func (ol *observers) add(o *Observer, now func() time.Time) {
	ol.mu.Lock()
	defer ol.mu.Unlock()
	next := &observerSet{now: now}
	if cur := ol.set.Load(); cur != nil {
		next.list = append(next.list, cur.list...)
	}
	next.list = append(next.list, o)
	ol.set.Store(next)
}

func (ol *observers) remove(o *Observer) {
	ol.mu.Lock()
	defer ol.mu.Unlock()
	cur := ol.set.Load()
	if cur == nil {
		return
	}
	next := &observerSet{now: cur.now}
	for _, x := range cur.list {
		if x != o {
			next.list = append(next.list, x)
		}
	}
	if len(next.list) == 0 {
		next = nil
	}
	ol.set.Store(next)
}

// stepDownReason classifies the words the loop gives endMastership (master.go,
// stop.go, transfer.go). TestStepDownReasons drives every path.
func stepDownReason(detail string) StepDownReason {
	switch {
	case strings.HasPrefix(detail, "self-fencing deadline passed"):
		return StepDownSelfFenced
	case strings.HasPrefix(detail, "lock no longer held"):
		return StepDownLockLost
	case strings.HasPrefix(detail, "no longer a candidate"):
		return StepDownHandedOver
	case strings.HasPrefix(detail, "transferred"):
		return StepDownTransferred
	case detail == "stopped":
		return StepDownStopped
	}
	return StepDownOther
}

// renewDone reports one renew attempt of mastership term, sent at sent,
// whose answer was ok and err; ctx is the attempts' ctx, done once the
// mastership has ended.
func (ol *observers) renewDone(ctx context.Context, term int64, sent time.Time, ok bool, err error) {
	set := ol.set.Load()
	if set == nil {
		return
	}
	a := RenewAttempt{Term: term, Latency: set.now().Sub(sent), Result: renewResult(ctx, ok, err), Err: err}
	for _, o := range set.list {
		if o.RenewDone != nil {
			o.RenewDone(a)
		}
	}
}

// renewResult classifies a renew attempt's answer, ok and err; ctx is the
// attempts' ctx.
func renewResult(ctx context.Context, ok bool, err error) RenewResult {
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)):
		return RenewAbandoned
	case err != nil:
		return RenewFailed
	case ok:
		return RenewRenewed
	}
	return RenewLockLost
}

// steppedDown reports the end of mastership term for reason, the words
// endMastership was given.
func (ol *observers) steppedDown(term int64, reason string) {
	set := ol.set.Load()
	if set == nil {
		return
	}
	s := StepDown{Term: term, Reason: stepDownReason(reason), Detail: reason}
	for _, o := range set.list {
		if o.SteppedDown != nil {
			o.SteppedDown(s)
		}
	}
}

// electionDone reports an election that started at start and completed
// with isMaster; a zero start (none seen, or no observer then) reports
// nothing.
func (ol *observers) electionDone(set *observerSet, start time.Time, isMaster bool) {
	if set == nil || start.IsZero() {
		return
	}
	r := ElectionResult{IsMaster: isMaster, Duration: set.now().Sub(start)}
	for _, o := range set.list {
		if o.ElectionDone != nil {
			o.ElectionDone(r)
		}
	}
}
