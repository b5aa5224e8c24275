// Package dialgate is a go-redis client hook that holds every dial of the
// client until the test opens the gate (or the dial's ctx ends), so that a
// test can act while a connection is being made.
package dialgate

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Gate holds the dials of the clients it is added to (AddHook) until Open.
type Gate struct {
	open    chan struct{}
	once    sync.Once
	waiting atomic.Int32
}

// New returns a closed gate.
func New() *Gate { return &Gate{open: make(chan struct{})} }

// Open lets every dial through, those waiting and those to come; it may be
// called more than once.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// Waiting returns how many dials wait at the gate.
func (g *Gate) Waiting() int { return int(g.waiting.Load()) }

// DialHook implements redis.Hook.
func (g *Gate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		g.waiting.Add(1)
		defer g.waiting.Add(-1)
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook.
func (g *Gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (g *Gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
