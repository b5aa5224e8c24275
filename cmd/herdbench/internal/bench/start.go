package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartResult is what StartUncontested measured, per round.
type StartResult struct {
	// Total is the time from the call of New until Start returned with this
	// process master.
	Total []time.Duration
	// Commands is the number of commands the client sent during New and
	// Start of the last round (the subscription's SUBSCRIBE included, the
	// dial of its connection not).
	Commands int
}

// StartUncontested measures, reps times, New + Start of the only candidate
// of a fresh lock name at default timings, on a client that is already
// connected (as an application's client is by the time it starts an
// election): the registry probe, the eviction check, the subscription (a
// connection of its own) and the acquire.
func StartUncontested(ctx context.Context, env *Env, reps int) (StartResult, error) {
	var res StartResult
	c := env.NewClient()
	defer c.Close()
	h := &commandCount{}
	c.AddHook(h)
	if err := c.Ping(ctx).Err(); err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	for r := range reps {
		lock := env.LockName("start")
		h.reset()
		t0 := time.Now()
		n, err := newNode(c, true, Timings(lock, "node", 30*time.Second))
		if err != nil {
			return res, err
		}
		err = n.Start(ctx)
		d := time.Since(t0)
		cmds := h.count()
		master := n.IsMaster()
		n.close(ctx)
		if err != nil {
			return res, fmt.Errorf("start, round %d: %w", r+1, err)
		}
		if !master {
			return res, fmt.Errorf("start, round %d: the only candidate of a fresh lock is not master", r+1)
		}
		res.Total = append(res.Total, d)
		res.Commands = cmds
	}
	return res, nil
}

// commandCount is a client hook that counts the commands sent through the
// client's command path, a pipeline's one by one, and keeps their names (a
// subscription's own commands do not pass hooks).
type commandCount struct {
	mu   sync.Mutex
	n    int
	cmds []string
}

func (h *commandCount) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n, h.cmds = 0, nil
}

func (h *commandCount) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *commandCount) add(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.n++
		h.cmds = append(h.cmds, c.Name())
	}
}

func (h *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}

func (h *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}
