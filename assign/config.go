package assign

import (
	"cmp"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
)

// The timings' defaults follow the election's LockTTL (the one the Planner
// or Worker is given), in the ratios of docs/tuning.md: at masterelection's
// default LockTTL of 30s, LeaseTTL is 10s and Settle 1s.
const (
	// DefaultSet is the default Config.Set.
	DefaultSet = "items"
	// LeaseTTLPerLockTTL is the default LeaseTTL as a fraction of LockTTL:
	// LockTTL / 3.
	LeaseTTLPerLockTTL = 3
	// SettlePerLockTTL is the default Settle as a fraction of LockTTL:
	// LockTTL / 30.
	SettlePerLockTTL = 30
	// GracePerLockTTL is the default Grace as a fraction of LockTTL:
	// LockTTL / 1.5, that is LockTTL × 2/3 (4s at a LockTTL of 6s, 20s at
	// the default 30s). It covers a container restart of a few seconds,
	// and equals SlaveTimeout + SlaveTimeout/3 (a sweep) with the
	// election's default ratios, so a crashed slave's items wait no longer
	// than its removal.
	GracePerLockTTL = 1.5
)

// Config configures a Planner and the Workers of one item set. The master's
// Planner and every slave's Worker must agree on Set; the timings are each
// side's own.
type Config struct {
	// Set names the item set: its keys are "<lock prefix>:assign:<Set>:…".
	// One election can carry several sets. Default: DefaultSet.
	Set string
	// LeaseTTL is how long an item's ownership lasts on Redis after a
	// Worker's last renewal: a Worker that stops renewing (killed, paused,
	// cut off) loses its items this long after its last renewal, and the
	// items' new owners may start then. Default: the election's LockTTL /
	// LeaseTTLPerLockTTL (10s at the default LockTTL), so that a dead
	// slave's items are free before the master has removed it (SlaveTimeout
	// and a sweep, LockTTL × 2/3 by default).
	LeaseTTL time.Duration
	// RenewInterval is how often a Worker renews all its items, in one
	// round trip however many it holds, and picks up the plan's changes.
	// Default: LeaseTTL / 3. It must be below LeaseTTL - Margin.
	RenewInterval time.Duration
	// Margin is how much earlier than its ownership on Redis a Worker's
	// own deadline for an item falls: the allowance for the two clocks'
	// rates and for scheduling. An item's ctx ends at the Worker's deadline.
	// Default: LeaseTTL / 10.
	Margin time.Duration
	// Settle is how long the Planner waits after a change (a slave joined
	// or left, an item was added or removed) for more changes before it
	// plans, so a fleet starting up is planned once. Default: the
	// election's LockTTL / SettlePerLockTTL (1s at the default LockTTL).
	Settle time.Duration
	// Resync is how often the Planner plans even without a change, to pick
	// up capability changes and items written by other processes. Default:
	// 10 × Settle.
	Resync time.Duration
	// Grace is how long the Planner keeps a departed slave's items planned
	// to it, waiting for a process with the same node id to come back (a
	// restart under a stable name: a StatefulSet pod, a host name): the
	// slave that returns within it claims its own items again, and nothing
	// moves. The cost: a slave that does not return leaves its items
	// without an owner this long before they move (Planner.Waiting lists
	// the slaves waited for).
	//
	// The grace counts from the slave's departure, as the Planner can tell
	// it: from when it learned the slave left (its slave-removed event, or
	// the plan that found it gone) when the last heartbeat it read for the
	// slave (registry LastSeen) was then at most the election's
	// SlaveTimeout old (the slave unregistered: a Stop); from that last
	// heartbeat when it was older (the master removed the slave because its
	// heartbeats stopped: a crash), so a crashed slave's items wait only
	// what its removal did not already take. A slave this Planner never
	// listed (it became master after the slave left) gets no grace.
	//
	// Default: the election's LockTTL / GracePerLockTTL (20s at the default
	// LockTTL). Negative: no grace, a departed slave's items move at the
	// next plan.
	Grace time.Duration
	// OnError, if set, is called with every error of the background loops
	// (a failed renewal, a failed plan, a handler's panic). It must not
	// block. Default: errors are dropped.
	OnError func(error)
	// clock tells the time and makes the timers of the Planner and the
	// Worker: the real clock, or a fake one set by the package's tests
	// (export_test.go).
	clock clock.Clock
}

// withDefaults returns c with its zero fields set to their defaults for an
// election whose LockTTL is lockTTL.
func (c Config) withDefaults(lockTTL time.Duration) Config {
	if lockTTL <= 0 {
		lockTTL = masterelection.DefaultLockTTL
	}
	c.Set = cmp.Or(c.Set, DefaultSet)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, lockTTL/LeaseTTLPerLockTTL)
	c.RenewInterval = cmp.Or(c.RenewInterval, c.LeaseTTL/3)
	c.Margin = cmp.Or(c.Margin, c.LeaseTTL/10)
	c.Settle = cmp.Or(c.Settle, lockTTL/SettlePerLockTTL)
	c.Resync = cmp.Or(c.Resync, 10*c.Settle)
	c.Grace = cmp.Or(c.Grace, time.Duration(float64(lockTTL)/GracePerLockTTL))
	c.clock = cmp.Or[clock.Clock](c.clock, clock.Real{})
	return c
}

// Validate reports the first problem of c with its defaults applied for
// masterelection's default LockTTL, naming the field and both values where
// two are involved. NewPlanner and NewWorker validate with their election's
// LockTTL.
func (c Config) Validate() error {
	return c.validate(masterelection.DefaultLockTTL)
}

// validate is Validate with the defaults of an election whose LockTTL is
// lockTTL.
func (c Config) validate(lockTTL time.Duration) error {
	c = c.withDefaults(lockTTL)
	if err := keyspace.ValidateName("Set", c.Set); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, r := range c.timingRules() {
		if r.broken {
			return fmt.Errorf("%w: %s", ErrInvalidConfig, r.why)
		}
	}
	return nil
}

// timingRule is one rule of the timings: broken, and why, naming the
// field and both values where two are involved.
type timingRule struct {
	broken bool
	why    string
}

// timingRules are the rules c's timings, defaults applied, must keep, in
// the order validate checks them.
func (c Config) timingRules() []timingRule {
	return []timingRule{
		{c.LeaseTTL < time.Millisecond, fmt.Sprintf("LeaseTTL %v is below 1ms", c.LeaseTTL)},
		{c.Margin < 0 || c.Margin >= c.LeaseTTL, fmt.Sprintf("Margin %v must be at least 0 and below LeaseTTL %v", c.Margin, c.LeaseTTL)},
		{c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseTTL-c.Margin,
			fmt.Sprintf("RenewInterval %v must be above 0 and below LeaseTTL - Margin = %v", c.RenewInterval, c.LeaseTTL-c.Margin)},
		{c.Settle < 0, fmt.Sprintf("Settle %v is negative", c.Settle)},
		{c.Resync <= 0, fmt.Sprintf("Resync %v must be above 0", c.Resync)},
		{c.Grace > masterelection.MaxDuration,
			fmt.Sprintf("Grace %v is above %v (a negative Grace turns the grace off)", c.Grace, masterelection.MaxDuration)},
	}
}

// report hands err to OnError when it is set.
func (c Config) report(err error) {
	if c.OnError != nil && err != nil {
		c.OnError(err)
	}
}
