package masterelection

import (
	"errors"
	"fmt"
	"time"

	"github.com/herdkit/herd/keyspace"
)

// Validate reports every problem of c, with its defaults filled in as New
// would, at once: the error wraps ErrInvalidConfig and names the values
// involved in each problem. A value the caller left to its default is shown
// with the formula that derived it ("HeartbeatInterval (333µs, its default
// LockTTL / 3)"), so the message names the field the caller set. An empty
// NodeID is valid: New fills in a UUID.
//
// The checks run in order: the names, then the durations against
// MaxDuration (a duration above it is reported alone, since the rules
// between the timings would compute with it), then every rule of
// timingRules.
func (c Config) Validate() error {
	v := validation{set: c.rescaledToLockTTL()}
	v.c = v.set.withDefaults()
	errs := v.names()
	if long := v.tooLong(); len(long) > 0 {
		return invalid(append(errs, long...))
	}
	for _, r := range timingRules {
		if r.broken(v.c) {
			errs = append(errs, r.message(v))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return invalid(errs)
}

// invalid joins the problems Validate found into one error wrapping
// ErrInvalidConfig.
func invalid(errs []error) error {
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// validation is a Config as Validate reads it.
type validation struct {
	c   Config // with every default filled in, as New uses it
	set Config // as the caller set it: zero where a default applies
}

// names checks LockName, and SlavePrefix and NodeID when set.
func (v validation) names() []error {
	var errs []error
	for _, n := range []struct {
		field, value string
		optional     bool
	}{
		{"LockName", v.c.LockName, false},
		{"SlavePrefix", v.c.SlavePrefix, true},
		{"NodeID", v.c.NodeID, true},
	} {
		if n.optional && n.value == "" {
			continue
		}
		if err := keyspace.ValidateName(n.field, n.value); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// tooLong reports each duration the caller set above MaxDuration. The
// defaults derived from a LockTTL within it stay within it.
func (v validation) tooLong() []error {
	var errs []error
	for _, f := range timings {
		if d := f.of(v.set); d > MaxDuration {
			errs = append(errs, fmt.Errorf("%s (%v) must be at most %v (MaxDuration)", f.name, d, MaxDuration))
		}
	}
	return errs
}

// show names a timing with its value, and with the formula of its default
// when the caller left it to the default: "HeartbeatInterval (10s)" or
// "HeartbeatInterval (10s, its default LockTTL / 3)".
func (v validation) show(name string) string {
	f := timingNamed(name)
	if f.formula != "" && f.of(v.set) == 0 {
		return fmt.Sprintf("%s (%v, its default %s)", name, f.of(v.c), f.formula)
	}
	return fmt.Sprintf("%s (%v)", name, f.of(v.c))
}

// timingRule is one rule on Config's values: broken reports whether c,
// with its defaults filled in, breaks it; message says how, naming the
// values involved. A rule between two values is not checked while one of
// them breaks a rule of its own (it is not positive), so each problem is
// reported once.
type timingRule struct {
	name    string // the rule that must hold
	broken  func(c Config) bool
	message func(v validation) error
}

// mustBePositive is the rule that the timing called name is positive.
func mustBePositive(name string) timingRule {
	t := timingNamed(name)
	return timingRule{name + " > 0",
		func(c Config) bool { return t.of(c) <= 0 },
		func(v validation) error { return fmt.Errorf("%s must be positive, got %v", name, t.of(v.c)) }}
}

// mustNotBeNegative is the rule that the timing called name is not
// negative.
func mustNotBeNegative(name string) timingRule {
	t := timingNamed(name)
	return timingRule{name + " >= 0",
		func(c Config) bool { return t.of(c) < 0 },
		func(v validation) error { return fmt.Errorf("%s must not be negative, got %v", name, t.of(v.c)) }}
}

// mustBeBelow is the rule that the timing called name, when positive, is
// less than the timing called bound, when positive.
func mustBeBelow(name, bound string) timingRule {
	t, b := timingNamed(name), timingNamed(bound)
	return timingRule{name + " < " + bound,
		func(c Config) bool { return t.of(c) > 0 && b.of(c) > 0 && t.of(c) >= b.of(c) },
		func(v validation) error { return fmt.Errorf("%s must be less than %s", v.show(name), v.show(bound)) }}
}

// timingRules are the rules Validate checks, in the order it reports them:
// every rule on Config's timings, the registry's among them.
var timingRules = []timingRule{
	mustBePositive("LockTTL"),
	mustBePositive("HeartbeatInterval"),
	mustBePositive("CheckInterval"),
	mustBePositive("ProcessTTL"),
	mustBePositive("SlaveTimeout"),
	{"LockTTL >= 1ms",
		func(c Config) bool { return c.LockTTL > 0 && c.LockTTL < time.Millisecond },
		func(v validation) error {
			return fmt.Errorf("%s must be at least 1ms, the resolution of Redis expiry", v.show("LockTTL"))
		}},
	{"HeartbeatInterval >= MinHeartbeatInterval",
		func(c Config) bool { return c.HeartbeatInterval > 0 && c.HeartbeatInterval < MinHeartbeatInterval },
		func(v validation) error {
			return fmt.Errorf("%s must be at least %v: it bounds every Redis call of the election",
				v.show("HeartbeatInterval"), MinHeartbeatInterval)
		}},
	{"WaitReplicas >= 0",
		func(c Config) bool { return c.WaitReplicas < 0 },
		func(v validation) error {
			return fmt.Errorf("WaitReplicas must not be negative, got %d", v.c.WaitReplicas)
		}},
	mustNotBeNegative("WaitTimeout"),
	mustBeBelow("WaitTimeout", "HeartbeatInterval"),
	mustNotBeNegative("TransferWindow"),
	mustBeBelow("TransferWindow", "LockTTL"),
	{"HandBackWindow >= SlaveTimeout + CheckInterval, or negative",
		func(c Config) bool { return c.HandBackWindow > 0 && c.HandBackWindow < c.minHandBackWindow() },
		func(v validation) error {
			return fmt.Errorf("%s must be at least SlaveTimeout (%v) + CheckInterval (%v), %v: a slave that crashed would still count as ready",
				v.show("HandBackWindow"), v.c.SlaveTimeout, v.c.CheckInterval, v.c.minHandBackWindow())
		}},
	mustNotBeNegative("StepDownMargin"),
	{"HeartbeatInterval * 3 <= LockTTL",
		// HeartbeatInterval > LockTTL/3 is HeartbeatInterval*3 > LockTTL in
		// integers, without the multiplication that could overflow.
		func(c Config) bool {
			return c.LockTTL > 0 && c.HeartbeatInterval > 0 && c.HeartbeatInterval > c.LockTTL/3
		},
		func(v validation) error {
			return fmt.Errorf("%s times 3 must not exceed %s", v.show("HeartbeatInterval"), v.show("LockTTL"))
		}},
	mustBeBelow("CheckInterval", "LockTTL"),
	mustBeBelow("ElectionJitter", "LockTTL"),
	{"StepDownMargin < LockTTL - HeartbeatInterval",
		func(c Config) bool {
			return c.LockTTL > 0 && c.HeartbeatInterval > 0 && c.StepDownMargin > 0 &&
				c.StepDownMargin >= c.LockTTL-c.HeartbeatInterval
		},
		func(v validation) error {
			return fmt.Errorf("%s must be less than %s minus %s",
				v.show("StepDownMargin"), v.show("LockTTL"), v.show("HeartbeatInterval"))
		}},
	// The registry's: one late or lost heartbeat must not let a live
	// process's entry expire, and the master must not remove a slave
	// between two of its heartbeats (the specification uses 3 × heartbeat).
	// A slave's writes may be 1.25 CheckInterval apart (slaveBeatStandIn).
	{"ProcessTTL > 2 × the longest silence of a live process",
		func(c Config) bool {
			return c.ProcessTTL > 0 && c.HeartbeatInterval > 0 && c.CheckInterval > 0 && c.ProcessTTL <= 2*c.longestSilence()
		},
		func(v validation) error {
			return fmt.Errorf("%s must exceed twice the longest a live process goes without a registry write, 2 × %v: the longer of %s and 1.25 × %s",
				v.show("ProcessTTL"), v.c.longestSilence(), v.show("HeartbeatInterval"), v.show("CheckInterval"))
		}},
	// A live slave writes its entry every CheckInterval, and at most 1.25
	// CheckInterval apart (slaveBeatStandIn); the master every
	// HeartbeatInterval. Below that, a live process would be removed, and a
	// twin could take its node id (docs/safety.md, "Twins and restarts").
	{"SlaveTimeout > the longest silence of a live process",
		func(c Config) bool {
			return c.SlaveTimeout > 0 && c.HeartbeatInterval > 0 && c.CheckInterval > 0 && c.SlaveTimeout <= c.longestSilence()
		},
		func(v validation) error {
			return fmt.Errorf("%s must exceed the longest a live process goes without a registry write, %v: the longer of %s and 1.25 × %s",
				v.show("SlaveTimeout"), v.c.longestSilence(), v.show("HeartbeatInterval"), v.show("CheckInterval"))
		}},
}
