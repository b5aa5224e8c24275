package durable

import "github.com/herdkit/herd/internal/clock"

// WithClock returns c with a clock of the tests' choosing: the clock is not
// part of the public Config.
func WithClock(c Config, clk clock.Clock) Config {
	c.clock = clk
	return c
}

// PipelineBlock is pipelineBlock: how long a read in a pipeline of client
// may block.
var PipelineBlock = pipelineBlock
