package durable

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/slogzero"
	"github.com/herdkit/herd/pubsub"
)

// Config configures a Router or a Consumer. The zero value of every field
// means its default; DefaultConfig returns them filled in. The constructors
// copy the Config, so changing it afterwards has no effect.
type Config struct {
	// LockName is the election's lock name, from which the inbox names are
	// derived (keyspace.Keys.Inbox). It must be the one the election uses.
	// Default: pubsub.DefaultLockName; taken from the Mastership (Router) or
	// from Terms (Consumer) when they are a pubsub.KeySource.
	LockName string
	// Cluster wraps the lock name in a Redis Cluster hash tag, as the
	// election does with the same setting; set by itself with a Cluster
	// client. Default: false.
	Cluster bool
	// MaxLen is the most entries one inbox may hold, counting the entries
	// not yet acknowledged (handled entries are deleted). A send to a full
	// inbox is refused with ErrInboxFull; nothing is trimmed, so nothing
	// accepted is ever dropped. Moves by Reassign are not refused. Memory:
	// about MaxLen × (envelope size + 100 bytes) per inbox at most.
	// Default: DefaultMaxLen; negative: no limit.
	MaxLen int64
	// ReassignBatch is the most entries Reassign moves, and Sweep adopts or
	// drops, per script call (one round trip and one fencing check each).
	// Default: 128.
	ReassignBatch int
	// ReassignTimeout bounds one sweep run by Maintain. Default: 30s.
	ReassignTimeout time.Duration
	// SweepInterval is how often Maintain sweeps the inboxes while this
	// process is master (Router.Sweep), besides at master-acquired and at
	// each slave-registered and slave-removed event: an inbox whose process
	// left the registry is moved to the live slaves within this interval of
	// the registry's removal. Default: 5s.
	SweepInterval time.Duration
	// Grace is how long Sweep leaves the inbox of a slave that left the
	// registry in place, waiting for a process with the same id to come
	// back (a restart under a stable name) and read it: the slave that
	// returns within it finds its entries in its own inbox, and nothing
	// moves. It counts from the moment this Router learned the slave left
	// (its slave-removed event under Maintain, else the first sweep that
	// found it gone), for a slave this Router saw live before; an inbox
	// whose process it never saw live (this process became master after it
	// left) moves at once. The cost: a slave that does not return leaves
	// its entries unhandled this long (a crash: this long after the master
	// removed it) before they move. Swept.Waiting lists the inboxes
	// waited for. Default: the Router's Mastership's LockTTL × 2/3 when it has a
	// LockTTL method (as *masterelection.MasterElection has; the ratio of
	// assign.Config.Grace), else DefaultGrace. Negative: no grace, an
	// inbox moves at the first sweep that finds its process gone.
	Grace time.Duration
	// DropBacklog makes a new master drop, instead of adopt, what its
	// predecessors stored in the inboxes and no slave handled: Sweep (and
	// the first Send or SendBatch of each mastership, which waits for it)
	// deletes every entry written under an older term, and Swept.Dropped
	// and OnSweep count them. Default: false, the new master adopts them
	// under its own term.
	DropBacklog bool
	// OnSweep receives the outcome of each sweep run by Maintain that
	// adopted, dropped, moved or deleted something, or left an inbox with
	// no slave to take it. It must not block. Default: nil.
	OnSweep func(Swept)
	// ReadCount is the most entries a Consumer reads per XREADGROUP.
	// Default: 64.
	ReadCount int64
	// Block is how long one XREADGROUP of a Consumer waits for new entries;
	// it is also the longest Close waits for the loop to notice. Default: 1s.
	Block time.Duration
	// RetryDelay is how long a Consumer waits before it hands an entry whose
	// handler failed to the handler again the first time (each later retry
	// waits twice as long as the one before, up to MaxRetryDelay), and
	// between attempts after a Redis error. A Consumer also looks at its
	// pending entries every RetryDelay, so an entry Redis delivered whose
	// reply was lost is handled within 2 × RetryDelay (plus the handling of
	// the entries ahead of it). Default: 1s.
	RetryDelay time.Duration
	// MaxRetryDelay caps the wait between two deliveries of an entry whose
	// handler keeps failing. Default: 30s.
	MaxRetryDelay time.Duration
	// MaxDeliveries is how many times a Consumer hands one entry to its
	// handler (all inboxes it went through counted) before it gives up: an
	// entry whose handler failed on its MaxDeliveries-th delivery, or that
	// was delivered that often without an outcome (the process stopped
	// during its handler), moves to the dead-letter stream (keyspace.Keys.Dead)
	// with its last error, where DeadLetters lists, retries or drops it.
	// With RetryDelay and MaxRetryDelay it sets how long a message whose
	// handler always fails takes to reach the dead letters: the sum of its
	// backoffs, 151 s to 160 s with the three defaults (package doc).
	// Default: DefaultMaxDeliveries; negative: no limit (retried forever).
	MaxDeliveries int64
	// OnDead receives each entry a Consumer moved to the dead-letter
	// stream, on the Consumer's loop goroutine. It must not block.
	// Default: nil (Consumer.Dead still counts them).
	OnDead func(DeadLetter)
	// OpTimeout bounds a Consumer's other calls: creating the group, reading
	// the term key, acknowledging. Default: 1s.
	OpTimeout time.Duration
	// OnError receives what a user should look into, from a Consumer's loop
	// and from the sweeps of Maintain: entries whose term Redis did not
	// confirm (*pubsub.UnverifiedTermError), entries that could not be
	// handled (*pubsub.MessageError: malformed, no handler, a handler error
	// or panic), a Redis call that failed again at its next attempt
	// (pubsub.ErrConnection) and failed sweeps. Normal operation calls it
	// never: an entry of an older term left for the new master to adopt
	// (OnStale), a Redis call that failed once and succeeded at its next
	// attempt (a lost reply: the entry is delivered again), a handler cut
	// short by Close only count and log at debug level. It is called on the goroutine that met the error,
	// one call at a time for a Consumer; it must not block. Default: nil,
	// errors are dropped (the counters still count).
	OnError func(error)
	// OnStale receives each entry a Consumer left unhandled because its
	// term is older than the highest it has seen: the new master adopts it
	// (it comes again under the new term) or drops it (DropBacklog). It is
	// expected at every master change, so it is no error; Consumer.Rejected
	// counts these. It runs on the Consumer's loop goroutine and must not
	// block. Default: nil.
	OnStale func(*pubsub.StaleTermError)
	// Holds, when set, is asked by a Consumer before each read: it reads
	// its inbox only while Holds returns true, and checks again every
	// Block meanwhile. Pass the election's HoldsNodeID, so that a process
	// started under the NodeID of a live one (a twin, refused) or left over
	// after another took its NodeID (stepped aside) reads nothing
	// (docs/safety.md, "Twins and restarts"). Default: nil, always read.
	Holds func() bool
	// Logger receives a Consumer's debug logs: the entries left for
	// adoption, the Redis calls that failed once. Default: the zero
	// Logger, silent.
	Logger zerolog.Logger
	// Slog, when set, receives those logs through log/slog instead of
	// Logger. Default: nil.
	Slog *slog.Logger
	// Terms, when set, is read by a Consumer before it judges each entry,
	// and its term raised into the fence, as pubsub.Config.Terms: pass the
	// election. A Consumer does not listen to the events channel, so
	// without Terms its fence rises only with the term key read at Start,
	// the entries it accepts and ObserveTerm. When it is also a
	// pubsub.KeySource, the inbox name comes from it. Default: nil.
	Terms pubsub.TermSource
	// clock stamps sentAt and dead letters, times the graces, and makes
	// the timers of Maintain and of a Consumer's loop: the real clock, or
	// a fake one set by the package's tests (export_test.go).
	clock clock.Clock
}

// Defaults of Config.
const (
	DefaultMaxLen          = 100_000
	DefaultReassignBatch   = 128
	DefaultReassignTimeout = 30 * time.Second
	DefaultReadCount       = 64
	DefaultBlock           = time.Second
	DefaultRetryDelay      = time.Second
	DefaultMaxRetryDelay   = 30 * time.Second
	DefaultMaxDeliveries   = 10
	DefaultSweepInterval   = 5 * time.Second
	DefaultOpTimeout       = time.Second
	// DefaultGrace is the default Grace of a Router whose Mastership has no
	// LockTTL method: LockTTL × 2/3 at masterelection's default LockTTL.
	DefaultGrace = 20 * time.Second
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		LockName:        pubsub.DefaultLockName,
		MaxLen:          DefaultMaxLen,
		ReassignBatch:   DefaultReassignBatch,
		ReassignTimeout: DefaultReassignTimeout,
		ReadCount:       DefaultReadCount,
		Block:           DefaultBlock,
		RetryDelay:      DefaultRetryDelay,
		MaxRetryDelay:   DefaultMaxRetryDelay,
		MaxDeliveries:   DefaultMaxDeliveries,
		SweepInterval:   DefaultSweepInterval,
		OpTimeout:       DefaultOpTimeout,
		Grace:           DefaultGrace,
		clock:           clock.Real{},
	}
}

// Validate reports every field that cannot be used, with its value, at
// once; the error wraps ErrInvalidConfig (and pubsub.ErrInvalidName for a
// name). Zero values are valid: they mean the default.
func (c Config) Validate() error {
	errs := c.names().Check()
	errs = append(errs, c.durationErrors()...)
	if c.ReassignBatch < 0 {
		errs = append(errs, fmt.Errorf("ReassignBatch (%d) is negative", c.ReassignBatch))
	}
	if c.ReadCount < 0 {
		errs = append(errs, fmt.Errorf("ReadCount (%d) is negative", c.ReadCount))
	}
	if c.RetryDelay > 0 && c.MaxRetryDelay > 0 && c.MaxRetryDelay < c.RetryDelay {
		errs = append(errs, fmt.Errorf("MaxRetryDelay (%s) is below RetryDelay (%s)", c.MaxRetryDelay, c.RetryDelay))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// durationErrors checks the durations: none negative but Grace (which a
// negative value turns off), none set below 1ms.
func (c Config) durationErrors() []error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReassignTimeout", c.ReassignTimeout}, {"Block", c.Block}, {"RetryDelay", c.RetryDelay}, {"MaxRetryDelay", c.MaxRetryDelay},
		{"SweepInterval", c.SweepInterval}, {"OpTimeout", c.OpTimeout}} {
		if err := durationError(d.name, d.v); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Grace > 0 && c.Grace < time.Millisecond {
		errs = append(errs, fmt.Errorf("Grace (%s) is below the minimum of 1ms (negative turns the grace off)", c.Grace))
	}
	return errs
}

// durationError says what is wrong with the duration field name of value
// v: negative, or set below 1ms; nil when it is zero (the default) or at
// least 1ms.
func durationError(name string, v time.Duration) error {
	switch {
	case v < 0:
		return fmt.Errorf("%s (%s) is negative", name, v)
	case v > 0 && v < time.Millisecond:
		return fmt.Errorf("%s (%s) is below the minimum of 1ms", name, v)
	}
	return nil
}

// withDefaults validates c and fills in its zero fields. The names come
// from from when it is a pubsub.KeySource, and carry the hash tag with a
// Redis Cluster client (as pubsub's do).
func (c Config) withDefaults(client redis.UniversalClient, from any) (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	n, err := c.names().Resolve(client, from)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.LockName, c.Cluster = n.LockName, n.Cluster
	d := DefaultConfig()
	c.MaxLen = max(cmp.Or(c.MaxLen, d.MaxLen), 0) // negative: 0, the script's "no limit"
	c.ReassignBatch = cmp.Or(c.ReassignBatch, d.ReassignBatch)
	c.ReassignTimeout = cmp.Or(c.ReassignTimeout, d.ReassignTimeout)
	c.SweepInterval = cmp.Or(c.SweepInterval, d.SweepInterval)
	c.ReadCount = cmp.Or(c.ReadCount, d.ReadCount)
	c.Block = cmp.Or(c.Block, d.Block)
	c = c.withRetryDefaults(d)
	c.MaxDeliveries = max(cmp.Or(c.MaxDeliveries, d.MaxDeliveries), 0) // negative: 0, no limit
	c.OpTimeout = cmp.Or(c.OpTimeout, d.OpTimeout)
	c.Grace = cmp.Or(c.Grace, defaultGrace(from))
	c.clock = cmp.Or(c.clock, d.clock)
	return c, nil
}

// withRetryDefaults fills in the retry delays from d, the defaults, so
// that they stay in order: RetryDelay's default at most a MaxRetryDelay
// set, MaxRetryDelay's at least the RetryDelay.
func (c Config) withRetryDefaults(d Config) Config {
	if c.RetryDelay == 0 {
		c.RetryDelay = d.RetryDelay
		if c.MaxRetryDelay > 0 {
			c.RetryDelay = min(c.RetryDelay, c.MaxRetryDelay)
		}
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = max(d.MaxRetryDelay, c.RetryDelay)
	}
	return c
}

// defaultGrace is Grace's default: two thirds of from's LockTTL when from
// has one (the election's), DefaultGrace otherwise.
func defaultGrace(from any) time.Duration {
	if l, ok := from.(interface{ LockTTL() time.Duration }); ok && l.LockTTL() > 0 {
		return l.LockTTL() * 2 / 3
	}
	return DefaultGrace
}

// logger is the logger of a Consumer: Slog through an adapter when it is
// set, else Logger.
func (c Config) logger() zerolog.Logger {
	if c.Slog != nil {
		return slogzero.Logger(c.Slog)
	}
	return c.Logger
}

// report hands err to OnError, when there is one.
func (c Config) report(err error) {
	if c.OnError != nil {
		c.OnError(err)
	}
}

// swept hands a sweep's outcome to OnSweep, when there is one.
func (c Config) swept(s Swept) {
	if c.OnSweep != nil {
		c.OnSweep(s)
	}
}
