package masterelection

import (
	"log/slog"
	"time"

	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

// Config is the configuration of one MasterElection. Its zero value is
// usable: every field left at zero takes the default its documentation
// states, filled in by New (DefaultConfig shows them all). The timing
// defaults scale with LockTTL, so setting LockTTL alone gives a valid
// configuration; with the default LockTTL of 30s they are the
// specification's values, but for CheckInterval (10s instead of 5s: an idle
// slave costs Redis one call per HeartbeatInterval, half as many).
//
// The timings relate as follows (Validate enforces the rules):
//
//	HeartbeatInterval * 3 <= LockTTL   a master gets at least three renewals per lock lifetime
//	CheckInterval < LockTTL            a slave looks at the lock at least once per lifetime
//	SlaveTimeout > max(HeartbeatInterval, 1.25 × CheckInterval)
//	                                   no live process is removed between two heartbeats
//	ElectionJitter < LockTTL
//	StepDownMargin < LockTTL - HeartbeatInterval
//
// A crashed master is replaced about LockTTL after its last renewal (its
// first-ranked slave contends at the expiry; at most LockTTL +
// ElectionJitter); a master that cannot reach Redis stops calling itself master
// LockTTL - StepDownMargin after its last successful renewal was sent.
type Config struct {
	// LockName prefixes every key and channel of the election. Processes with
	// the same LockName on the same Redis elect one master.
	// Default: "master-election", as the specification.
	LockName string

	// SlavePrefix prefixes the per-process routing channels: a process with
	// node id X receives on SlavePrefix+X. The registry's ProcessChannel and
	// a pubsub Router or Subscriber built with this election use it.
	// Default: "worker:slave:", as the specification.
	SlavePrefix string

	// Identifier is a human-readable name of this process, shown in the
	// registry. Default: the program's file name.
	Identifier string

	// NodeID identifies this process in the election and names its channel.
	// It must be unique among the processes of the election.
	// Default: a new random UUID.
	NodeID string

	// LockTTL is how long the master lock lives without renewal.
	// Default: 30s.
	LockTTL time.Duration

	// HeartbeatInterval is how often the master renews the lock. A renewal
	// still unanswered after HeartbeatInterval/2 is joined by another
	// attempt, and a failed one is retried at least that often, until the
	// self-fencing deadline. Default: LockTTL / 3 (10s).
	HeartbeatInterval time.Duration

	// CheckInterval is how often a slave checks the lock; its registry
	// heartbeat rides in the same script call, so an idle slave costs Redis
	// one call per CheckInterval. Slaves also check at the instant the
	// current lock would expire, and when a lock notice comes, so failover
	// does not wait for this interval. The master sweeps its slave list this
	// often, and at least every SlaveTimeout/3. Default: HeartbeatInterval
	// (10s); the specification's 5s costs every idle slave twice as many
	// calls.
	CheckInterval time.Duration

	// ElectionJitter is the longest a slave waits before it contends for a
	// lock it found free or saw released: the slaves the master ranked
	// (its succession) take turns a quarter of it apart, the first at once,
	// and the others wait past those turns, at random within it. A negative
	// value means no delay. Default: LockTTL / 15 (2s).
	ElectionJitter time.Duration

	// StepDownMargin is how long before its lock could expire for others the
	// master stops considering itself master when it cannot renew. It covers
	// the rate difference between this machine's clock and Redis's and the
	// time a renewal spends in flight. Default: LockTTL / 10 (3s).
	StepDownMargin time.Duration

	// NonCandidate makes this process follow the election without ever
	// contending for mastership (as after SetCandidate(false)); it can
	// become a candidate later with SetCandidate(true).
	// Default: false, the process contends.
	NonCandidate bool

	// Priority is this process's preference for mastership: higher is
	// preferred. It is published in the registry entry. While master, a
	// process hands over (as Transfer does) to a candidate of higher
	// priority once it has seen it ready for HandBackWindow, and its
	// succession ranks candidates of higher priority first, so that a
	// crashed master's place goes to the highest priority it ranked.
	// Processes of equal priority never hand over to each other. Any int;
	// negative values rank below the default. Default: 0.
	Priority int

	// HandBackWindow gates the hand-back to a process of higher Priority
	// than the master's. The master hands over only to a candidate slave
	// it has seen registered and heartbeating for HandBackWindow without a
	// break (a leave, a restart or a mastership of its own starts the count
	// again), and at most one hand-back happens per HandBackWindow in the
	// whole herd (the key <LockName>:handback, with the window as TTL), so
	// a preferred process in a restart loop moves the mastership at most
	// once per window. It must be at least SlaveTimeout + CheckInterval,
	// the longest a crashed slave can stay listed as live by the master.
	// A negative value turns hand-backs off (Priority still orders the
	// succession). Default: LockTTL, or SlaveTimeout + CheckInterval when
	// that is longer (30s).
	HandBackWindow time.Duration

	// Capabilities are what this process offers for work assignment,
	// published with its registry entry. Default: none.
	Capabilities registry.Capabilities

	// ProcessTTL is how long this process's registry entry lives without a
	// heartbeat. It must exceed twice the longer of HeartbeatInterval and
	// 1.25 × CheckInterval (the longest a live master or slave goes
	// between two writes of its entry). Default: LockTTL * 3/2 (45s, as the
	// specification).
	ProcessTTL time.Duration

	// SlaveTimeout is how old a slave's last heartbeat may get before the
	// master removes it from the registry and emits slave-removed. It must
	// exceed the longest a live process goes without a heartbeat, the longer
	// of HeartbeatInterval and 1.25 × CheckInterval, and should cover the
	// clock skew between hosts too. A dead slave is removed within
	// SlaveTimeout + SlaveTimeout/3 of its last heartbeat (the master's
	// sweeps). Default: LockTTL / 2 (15s, as the specification).
	SlaveTimeout time.Duration

	// RegistryBackend chooses how registry entries get their TTL; see
	// registry.Backend. Default: registry.BackendAuto, picked by trying the
	// commands once at Start.
	RegistryBackend registry.Backend

	// WaitReplicas, when positive, makes every acquire and renew wait until
	// that many replicas have acknowledged the lock write (Redis WAIT on the
	// same connection). An acquisition with too few acknowledgements is
	// released at once and retried; a renewal with too few counts as failed,
	// so a master that cannot replicate its lock steps down at its
	// self-fencing deadline. It narrows, but does not close, the window in
	// which a fail-over to a replica loses the lock (see docs/topologies.md);
	// with it, no master is elected while fewer replicas are reachable.
	// Default: 0, no waiting.
	WaitReplicas int

	// WaitTimeout bounds each WAIT when WaitReplicas is positive; it must be
	// less than HeartbeatInterval. Default: HeartbeatInterval / 4.
	WaitTimeout time.Duration

	// Standalone makes this process master at Start, for good, without
	// Redis: New accepts a nil client and nothing is read or written. It is
	// for single-instance deployments that run the same code as clustered
	// ones. There is no coordination at all: two standalone processes are
	// two masters. Term is a timestamp in milliseconds taken at Start.
	// Default: false.
	Standalone bool

	// TransferWindow is how long a Transfer reserves the released lock for
	// the successor it names: until it passes only that node can acquire
	// (Redis enforces it). After Transfer(ctx, ""), which reserves nothing,
	// the stepping-down master does not contend for as long.
	// A successor that does not take the lock by then (dead, not a
	// candidate) leaves it to the normal election. Default: LockTTL / 10.
	TransferWindow time.Duration

	// IgnoreRemoteTransfers turns off transfer requests published on the
	// lock's control channel (<lock>:control). Anyone who may PUBLISH there
	// can ask the master to hand over, as anyone who may DEL the lock key
	// can force an election; see docs/safety.md. Default: false, honoured.
	IgnoreRemoteTransfers bool

	// Logger receives the election's diagnostic logs. Default: silent.
	Logger zerolog.Logger

	// Slog, when set, receives the election's diagnostic logs (and its
	// registry's) through log/slog instead of Logger: one record per log
	// line, with its level, message and fields as attributes. Default: nil,
	// Logger is used.
	Slog *slog.Logger

	// defaultsOf is the LockTTL from which DefaultConfig derived the
	// timings it spelled out; 0 for a Config not made by DefaultConfig.
	// Those timings the caller left as they were follow a LockTTL it
	// changed (rescaledToLockTTL), as they do in a Config{LockTTL: ...}.
	defaultsOf time.Duration
}

// MaxDuration is the longest duration a Config field may hold: a year.
// Longer ones are refused by Validate, so that no sum or multiple of them
// that herd computes (a deadline, ProcessTTL's default of LockTTL * 3/2)
// can overflow a time.Duration.
const MaxDuration = 365 * 24 * time.Hour

// MinHeartbeatInterval is the shortest HeartbeatInterval: every Redis call
// of the election after its start is bounded by HeartbeatInterval (Start's
// and those until the first election resolved, by LockTTL), and Redis
// expires keys to the millisecond.
const MinHeartbeatInterval = time.Millisecond

// DefaultLockTTL is the default Config.LockTTL, the specification's.
const DefaultLockTTL = 30 * time.Second

// replication is what the lock writes wait for.
func (c Config) replication() rdb.Replication {
	return rdb.Replication{Replicas: c.WaitReplicas, Timeout: c.WaitTimeout}
}

// retryInterval is the first delay before retrying after a Redis error; it
// doubles on each consecutive error up to maxRetryInterval.
func (c Config) retryInterval() time.Duration {
	return max(min(c.HeartbeatInterval/20, 100*time.Millisecond), time.Millisecond)
}

func (c Config) maxRetryInterval() time.Duration {
	return max(min(c.CheckInterval, 2*time.Second), c.retryInterval())
}
