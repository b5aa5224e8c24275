package masterelection

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
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
// configRules.
func (c Config) Validate() error {
	v := validation{set: c.rescaledToLockTTL()}
	v.c = v.set.withDefaults()
	errs := v.names()
	if long := v.tooLong(); len(long) > 0 {
		return invalid(append(errs, long...))
	}
	for _, r := range configRules {
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
		if err := scripts.ValidateName(n.field, n.value); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// tooLong reports each duration the caller set above MaxDuration. The
// defaults derived from a LockTTL within it stay within it.
func (v validation) tooLong() []error {
	var errs []error
	for _, f := range timingFields {
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
	f := timingField(name)
	if f.formula != "" && f.of(v.set) == 0 {
		return fmt.Sprintf("%s (%v, its default %s)", name, f.of(v.c), f.formula)
	}
	return fmt.Sprintf("%s (%v)", name, f.of(v.c))
}

// timing is one duration field of Config: its name, how to read it, and
// the formula of its default for Validate's messages (withDefaults computes
// the defaults).
type timing struct {
	name    string
	of      func(Config) time.Duration
	formula string // empty when the default is a constant
}

// timingFields are Config's durations, in the order Validate reports them.
var timingFields = []timing{
	{"LockTTL", func(c Config) time.Duration { return c.LockTTL }, ""},
	{"HeartbeatInterval", func(c Config) time.Duration { return c.HeartbeatInterval }, "LockTTL / 3"},
	{"CheckInterval", func(c Config) time.Duration { return c.CheckInterval }, "LockTTL / 6"},
	{"ElectionJitter", func(c Config) time.Duration { return c.ElectionJitter }, "LockTTL / 15"},
	{"StepDownMargin", func(c Config) time.Duration { return c.StepDownMargin }, "LockTTL / 10"},
	{"ProcessTTL", func(c Config) time.Duration { return c.ProcessTTL }, "LockTTL * 3/2"},
	{"SlaveTimeout", func(c Config) time.Duration { return c.SlaveTimeout }, "LockTTL / 2"},
	{"WaitTimeout", func(c Config) time.Duration { return c.WaitTimeout }, "HeartbeatInterval / 4"},
	{"TransferWindow", func(c Config) time.Duration { return c.TransferWindow }, "LockTTL / 10, at least 1ms"},
	{"HandBackWindow", func(c Config) time.Duration { return c.HandBackWindow }, "LockTTL, at least SlaveTimeout + CheckInterval"},
}

// timingField returns the entry of timingFields called name.
func timingField(name string) timing {
	for _, f := range timingFields {
		if f.name == name {
			return f
		}
	}
	panic("masterelection: no Config timing " + name)
}

// configRule is one rule on Config's values: broken reports whether c,
// with its defaults filled in, breaks it; message says how, naming the
// values involved. A rule between two values is not checked while one of
// them breaks a rule of its own (it is not positive), so each problem is
// reported once.
type configRule struct {
	name    string // the rule that must hold
	broken  func(c Config) bool
	message func(v validation) error
}

// configRules are the rules Validate checks, in the order it reports them.
var configRules = []configRule{
	{"LockTTL > 0",
		func(c Config) bool { return c.LockTTL <= 0 },
		func(v validation) error { return fmt.Errorf("LockTTL must be positive, got %v", v.c.LockTTL) }},
	{"HeartbeatInterval > 0",
		func(c Config) bool { return c.HeartbeatInterval <= 0 },
		func(v validation) error {
			return fmt.Errorf("HeartbeatInterval must be positive, got %v", v.c.HeartbeatInterval)
		}},
	{"CheckInterval > 0",
		func(c Config) bool { return c.CheckInterval <= 0 },
		func(v validation) error {
			return fmt.Errorf("CheckInterval must be positive, got %v", v.c.CheckInterval)
		}},
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
	{"WaitTimeout >= 0",
		func(c Config) bool { return c.WaitTimeout < 0 },
		func(v validation) error {
			return fmt.Errorf("WaitTimeout must not be negative, got %v", v.c.WaitTimeout)
		}},
	{"WaitTimeout < HeartbeatInterval",
		func(c Config) bool {
			return c.WaitTimeout > 0 && c.HeartbeatInterval > 0 && c.WaitTimeout >= c.HeartbeatInterval
		},
		func(v validation) error {
			return fmt.Errorf("%s must be less than %s", v.show("WaitTimeout"), v.show("HeartbeatInterval"))
		}},
	{"TransferWindow >= 0",
		func(c Config) bool { return c.TransferWindow < 0 },
		func(v validation) error {
			return fmt.Errorf("TransferWindow must not be negative, got %v", v.c.TransferWindow)
		}},
	{"TransferWindow < LockTTL",
		func(c Config) bool { return c.LockTTL > 0 && c.TransferWindow >= c.LockTTL },
		func(v validation) error {
			return fmt.Errorf("%s must be less than %s", v.show("TransferWindow"), v.show("LockTTL"))
		}},
	{"HandBackWindow >= SlaveTimeout + CheckInterval, or negative",
		func(c Config) bool { return c.HandBackWindow > 0 && c.HandBackWindow < c.minHandBackWindow() },
		func(v validation) error {
			return fmt.Errorf("%s must be at least SlaveTimeout (%v) + CheckInterval (%v), %v: a slave that crashed would still count as ready",
				v.show("HandBackWindow"), v.c.SlaveTimeout, v.c.CheckInterval, v.c.minHandBackWindow())
		}},
	{"StepDownMargin >= 0",
		func(c Config) bool { return c.StepDownMargin < 0 },
		func(v validation) error {
			return fmt.Errorf("StepDownMargin must not be negative, got %v", v.c.StepDownMargin)
		}},
	{"HeartbeatInterval * 3 <= LockTTL",
		// HeartbeatInterval > LockTTL/3 is HeartbeatInterval*3 > LockTTL in
		// integers, without the multiplication that could overflow.
		func(c Config) bool {
			return c.LockTTL > 0 && c.HeartbeatInterval > 0 && c.HeartbeatInterval > c.LockTTL/3
		},
		func(v validation) error {
			return fmt.Errorf("%s times 3 must not exceed %s", v.show("HeartbeatInterval"), v.show("LockTTL"))
		}},
	{"CheckInterval < LockTTL",
		func(c Config) bool { return c.LockTTL > 0 && c.CheckInterval >= c.LockTTL },
		func(v validation) error {
			return fmt.Errorf("%s must be less than %s", v.show("CheckInterval"), v.show("LockTTL"))
		}},
	{"ElectionJitter < LockTTL",
		func(c Config) bool { return c.LockTTL > 0 && c.ElectionJitter >= c.LockTTL },
		func(v validation) error {
			return fmt.Errorf("%s must be less than %s", v.show("ElectionJitter"), v.show("LockTTL"))
		}},
	{"StepDownMargin < LockTTL - HeartbeatInterval",
		func(c Config) bool {
			return c.LockTTL > 0 && c.HeartbeatInterval > 0 && c.StepDownMargin > 0 &&
				c.StepDownMargin >= c.LockTTL-c.HeartbeatInterval
		},
		func(v validation) error {
			return fmt.Errorf("%s must be less than %s minus %s",
				v.show("StepDownMargin"), v.show("LockTTL"), v.show("HeartbeatInterval"))
		}},
	{"the registry's: ProcessTTL > 2 * heartbeat, SlaveTimeout > heartbeat",
		func(c Config) bool {
			return c.HeartbeatInterval > 0 && c.CheckInterval > 0 && c.registryTimings() != nil
		},
		validation.registryProblem},
}

// registryTimings checks the timings of the registry's heartbeats, the
// master's and the slaves' (registry.ValidateTimings).
func (c Config) registryTimings() error {
	return registry.ValidateTimings(c.ProcessTTL, max(c.HeartbeatInterval, c.CheckInterval), c.SlaveTimeout)
}

// registryProblem is the registry's complaint about the timings, followed
// by those of them the caller left to their defaults, with their formulas:
// the registry names its values but not where they came from.
func (v validation) registryProblem() error {
	err := v.c.registryTimings()
	var derived []string
	for _, name := range []string{"ProcessTTL", "SlaveTimeout", "HeartbeatInterval", "CheckInterval"} {
		if timingField(name).of(v.set) == 0 {
			derived = append(derived, v.show(name))
		}
	}
	if len(derived) > 0 {
		err = fmt.Errorf("%w; left to their defaults: %s", err, strings.Join(derived, ", "))
	}
	return err
}
