package masterelection

import (
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
