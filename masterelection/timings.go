package masterelection

import (
	"fmt"
	"time"
)

// timing is one duration field of Config: its name, where it lives, its
// default, and the default's formula for Validate's messages. timings is the
// one table of Config's durations: withDefaults fills them in from it,
// Validate names them from it, and the rules on them are timingRules.
type timing struct {
	name  string
	field func(c *Config) *time.Duration
	// derive computes the default from ttl (LockTTL, or DefaultLockTTL when
	// LockTTL is negative) and the fields before it, already filled in; nil
	// for LockTTL, whose default is a constant.
	derive  func(ttl time.Duration, c Config) time.Duration
	formula string
	// scaled: its default follows LockTTL, so a value that DefaultConfig
	// spelled out for another LockTTL is taken for the default again
	// (rescaledToLockTTL).
	scaled bool
}

// of reads the field from c.
func (t timing) of(c Config) time.Duration { return *t.field(&c) }

// timings are Config's durations, in the order Validate reports them and
// withDefaults derives them (a default may use those above it).
var timings = []timing{
	{name: "LockTTL", field: func(c *Config) *time.Duration { return &c.LockTTL }},
	{"HeartbeatInterval", func(c *Config) *time.Duration { return &c.HeartbeatInterval },
		func(ttl time.Duration, _ Config) time.Duration { return ttl / 3 }, "LockTTL / 3", true},
	{"CheckInterval", func(c *Config) *time.Duration { return &c.CheckInterval },
		func(ttl time.Duration, _ Config) time.Duration { return ttl / 6 }, "LockTTL / 6", true},
	{"ElectionJitter", func(c *Config) *time.Duration { return &c.ElectionJitter },
		func(ttl time.Duration, _ Config) time.Duration { return ttl / 15 }, "LockTTL / 15", true},
	{"StepDownMargin", func(c *Config) *time.Duration { return &c.StepDownMargin },
		func(ttl time.Duration, _ Config) time.Duration { return ttl / 10 }, "LockTTL / 10", false},
	{"ProcessTTL", func(c *Config) *time.Duration { return &c.ProcessTTL },
		// ttl * 3/2, without overflowing
		func(ttl time.Duration, _ Config) time.Duration { return ttl + ttl/2 }, "LockTTL * 3/2", true},
	{"SlaveTimeout", func(c *Config) *time.Duration { return &c.SlaveTimeout },
		func(ttl time.Duration, _ Config) time.Duration { return ttl / 2 }, "LockTTL / 2", true},
	{"WaitTimeout", func(c *Config) *time.Duration { return &c.WaitTimeout },
		func(_ time.Duration, c Config) time.Duration { return c.HeartbeatInterval / 4 }, "HeartbeatInterval / 4", false},
	{"TransferWindow", func(c *Config) *time.Duration { return &c.TransferWindow },
		func(ttl time.Duration, _ Config) time.Duration { return max(ttl/10, time.Millisecond) }, "LockTTL / 10, at least 1ms", false},
	{"HandBackWindow", func(c *Config) *time.Duration { return &c.HandBackWindow },
		func(ttl time.Duration, c Config) time.Duration { return max(ttl, c.minHandBackWindow()) },
		"LockTTL, at least SlaveTimeout + CheckInterval", false},
}

// timingNamed returns the entry of timings called name.
func timingNamed(name string) timing {
	for _, t := range timings {
		if t.name == name {
			return t
		}
	}
	panic("masterelection: no Config timing " + name)
}

// withDerivedTimings fills in every zero duration of c but LockTTL from
// ttl, in the order of timings.
func (c Config) withDerivedTimings(ttl time.Duration) Config {
	for _, t := range timings {
		if p := t.field(&c); *p == 0 && t.derive != nil {
			*p = t.derive(ttl, c)
		}
	}
	return c
}

// rescaledToLockTTL returns c with every duration that DefaultConfig
// spelled out for another LockTTL set back to zero, so that withDefaults
// derives it from c's LockTTL (see DefaultConfig).
func (c Config) rescaledToLockTTL() Config {
	of := c.defaultsOf
	c.defaultsOf = 0
	ttl := c.LockTTL
	if ttl == 0 {
		ttl = DefaultLockTTL
	}
	if of == 0 || ttl == of {
		return c
	}
	spelled := Config{LockTTL: of}.withDefaults()
	for _, t := range timings {
		if p := t.field(&c); t.scaled && *p == t.of(spelled) {
			*p = 0
		}
	}
	return c
}

// heartbeat is the longest interval at which a process renews its registry
// entry: the slaves' CheckInterval or the master's HeartbeatInterval.
func (c Config) heartbeat() time.Duration { return max(c.HeartbeatInterval, c.CheckInterval) }

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
	{"ProcessTTL > 2 × the heartbeat interval",
		func(c Config) bool {
			return c.ProcessTTL > 0 && c.HeartbeatInterval > 0 && c.CheckInterval > 0 && c.ProcessTTL <= 2*c.heartbeat()
		},
		func(v validation) error {
			return fmt.Errorf("%s must exceed twice the heartbeat interval, the longer of %s and %s",
				v.show("ProcessTTL"), v.show("HeartbeatInterval"), v.show("CheckInterval"))
		}},
	{"SlaveTimeout > the heartbeat interval",
		func(c Config) bool {
			return c.SlaveTimeout > 0 && c.HeartbeatInterval > 0 && c.CheckInterval > 0 && c.SlaveTimeout <= c.heartbeat()
		},
		func(v validation) error {
			return fmt.Errorf("%s must exceed the heartbeat interval, the longer of %s and %s",
				v.show("SlaveTimeout"), v.show("HeartbeatInterval"), v.show("CheckInterval"))
		}},
}
