package pubsub

import "github.com/herdkit/herd/internal/clock"

// WithClock returns c with a clock of the tests' choosing: the clock is not
// an option for users (its type is internal), only for the tests.
func WithClock(c Config, clk clock.Clock) Config {
	c.clock = clk
	return c
}
