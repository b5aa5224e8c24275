package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/benchkit"
)

// redisOptions are the client options of every Redis client of the run:
// go-redis honours ctx deadlines only with ContextTimeoutEnabled.
func redisOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
}

// commandCalls reads INFO commandstats: calls per command name ("evalsha",
// "client|setinfo").
func commandCalls(ctx context.Context, c *redis.Client) (benchkit.CommandStats, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := benchkit.ParseCommandStats(info)
	if len(out) == 0 {
		return nil, errors.New("INFO commandstats: no command counted")
	}
	return out, nil
}

// rtHook is a go-redis hook that counts round trips on a client's command
// path: one per command, one per pipeline or transaction. PINGs are also
// counted apart, to tell them from the subscriptions' PINGs in the
// server's counts.
type rtHook struct {
	roundTrips atomic.Int64
	pings      atomic.Int64
}

func (h *rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.roundTrips.Add(1)
		if cmd.Name() == "ping" {
			h.pings.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.roundTrips.Add(1)
		return next(ctx, cmds)
	}
}
