package masterelection

import (
	"errors"
	"fmt"

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
