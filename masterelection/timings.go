package masterelection

import (
	"os"
	"path/filepath"
	"time"

	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
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
		func(_ time.Duration, c Config) time.Duration { return c.HeartbeatInterval }, "HeartbeatInterval", true},
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

// longestSilence is the longest a live process goes without writing its
// registry entry: a master renews it every HeartbeatInterval; a slave's
// heartbeat rides its checks, every CheckInterval, and the membership loop
// stands in once none rode for slaveBeatStandIn (the follow loop was
// contending, waiting out a data loss, or failing).
func (c Config) longestSilence() time.Duration {
	return max(c.HeartbeatInterval, slaveBeatStandIn(c.CheckInterval))
}

// slaveBeatStandIn is how long after a slave's last registry write the
// membership loop writes the entry itself, the follow loop's checks having
// carried no heartbeat since: a quarter of a check interval late.
func slaveBeatStandIn(check time.Duration) time.Duration { return check + check/4 }

// sweepInterval is how often a master's slave tracker looks for slaves
// whose last heartbeat is SlaveTimeout old: every CheckInterval, and at
// least three times per SlaveTimeout, so that a dead slave is removed
// within SlaveTimeout + SlaveTimeout/3 (LockTTL × 2/3 with the defaults)
// although slaves look at the lock only once per HeartbeatInterval. A
// sweep reads the registry once, and only the master sweeps.
func (c Config) sweepInterval() time.Duration {
	return min(c.CheckInterval, max(c.SlaveTimeout/3, time.Millisecond))
}

// DefaultConfig returns the defaults, the specification's values but for
// CheckInterval (see Config): LockName, LockTTL,
// HeartbeatInterval, CheckInterval, ElectionJitter, ProcessTTL and
// SlaveTimeout set, as New would set them in a zero Config. The fields whose
// defaults follow other fields (StepDownMargin, WaitTimeout,
// TransferWindow, HandBackWindow) stay zero, so New derives them from the values finally
// set, as does HandBackWindow; NodeID stays empty (New draws a UUID). Config{} is the same
// configuration; DefaultConfig only spells it out.
//
// The timings it spells out follow LockTTL: a caller who changes LockTTL
// and leaves HeartbeatInterval, CheckInterval, ElectionJitter, ProcessTTL
// or SlaveTimeout at the value DefaultConfig gave gets the default for its
// LockTTL, exactly as with Config{LockTTL: ...}. (Setting one of them to
// exactly DefaultConfig's value has the same effect; set another value to
// keep it apart.)
func DefaultConfig() Config {
	c := Config{}.withDefaults()
	c.StepDownMargin, c.WaitTimeout, c.TransferWindow, c.HandBackWindow = 0, 0, 0, 0
	c.defaultsOf = c.LockTTL
	return c
}

// withDefaults returns c with every zero field set to its default: the
// one place defaults are decided (the timings' defaults are in timings).
// NodeID stays as it is.
func (c Config) withDefaults() Config {
	c = c.rescaledToLockTTL()
	if c.LockName == "" {
		c.LockName = keyspace.DefaultLockName
	}
	if c.Identifier == "" {
		c.Identifier = filepath.Base(os.Args[0])
	}
	if c.RegistryBackend == "" {
		c.RegistryBackend = registry.BackendAuto
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	ttl := c.LockTTL // the base of the derived defaults
	if ttl < 0 {
		ttl = DefaultLockTTL // Validate reports the negative LockTTL alone
	}
	return c.withDerivedTimings(ttl)
}

// minHandBackWindow is the shortest HandBackWindow: a slave that stops
// heartbeating is removed by the master's tracker at most SlaveTimeout +
// CheckInterval (a sweep) after its last heartbeat, so one seen live for
// that long did heartbeat after it registered.
func (c Config) minHandBackWindow() time.Duration {
	return max(c.SlaveTimeout, 0) + max(c.CheckInterval, 0)
}
