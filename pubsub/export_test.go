package pubsub

import (
	"context"

	"github.com/herdkit/herd/internal/clock"
)

// WithClock returns c with a clock of the tests' choosing: the clock is not
// an option for users (its type is internal), only for the tests.
func WithClock(c Config, clk clock.Clock) Config {
	c.clock = clk
	return c
}

// ReadNotice hands payload to s as if it had come on the events channel,
// under ctx (the receiving loop's, which Close ends).
func ReadNotice(s *Subscriber, ctx context.Context, payload string) { s.onNotice(ctx, payload) }
