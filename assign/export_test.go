package assign

import "github.com/herdkit/herd/internal/clock"

// KeptItems returns p's copy of its set's items, which it puts back when
// Redis loses them.
func KeptItems(p *Planner) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kept.items
}

// WithClock returns c with a clock of the tests' choosing: the clock is not
// part of the public Config.
func WithClock(c Config, clk clock.Clock) Config {
	c.clock = clk
	return c
}
