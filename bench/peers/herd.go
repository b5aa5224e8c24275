package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
)

// herdPeer measures herd through its public API, the way a user runs it:
// masterelection.New, OnMasterAcquired, Start, Stop, each process with a
// client of its own.
//
// trace, when not nil, receives after every uncontested Start what its
// client sent until Start returned (seqHook.String).
func herdPeer(addr string, hook *rtHook, trace func(string)) peer {
	newNode := func(c *redis.Client, lock, id string, t timings) node {
		return &herdNode{client: c, cfg: herdConfig(lock, id, t), acq: make(chan time.Time, 4)}
	}
	return redisPeer("herd", addr, hook, newNode,
		func(ctx context.Context, c *redis.Client, lock string) (time.Duration, time.Duration, error) {
			cfg := herdConfig(lock, "solo", timingsOf(time.Second))
			var seq *seqHook
			if trace != nil {
				seq = &seqHook{}
				c.AddHook(seq)
			}
			t0 := time.Now()
			m, err := masterelection.New(c, cfg)
			if err != nil {
				return 0, 0, err
			}
			err = m.Start(ctx)
			d := time.Since(t0)
			if seq != nil {
				trace(seq.String())
			}
			lead := m.IsMaster()
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if serr := m.Stop(sctx); err == nil {
				err = serr
			}
			if err == nil && !lead {
				err = fmt.Errorf("herd: Start on the fresh lock %q returned as slave", lock)
			}
			return d, 0, err
		})
}

// herdConfig is DefaultConfig with lock, id and t, and every timing that
// depends on them at DefaultConfig's ratio: CheckInterval the renewal
// interval (herd's default; t.Check is the pollers' interval), SlaveTimeout
// TTL/2, ElectionJitter TTL/15 (2 s of 30 s), StepDownMargin and
// TransferWindow TTL/10, WaitTimeout a quarter of the renewal interval.
func herdConfig(lock, id string, t timings) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = lock
	cfg.NodeID = id
	cfg.Identifier = id
	cfg.LockTTL = t.TTL
	cfg.HeartbeatInterval = t.Renew
	cfg.CheckInterval = t.Renew
	cfg.SlaveTimeout = t.TTL / 2
	cfg.ElectionJitter = t.TTL / 15
	cfg.StepDownMargin = t.TTL / 10
	cfg.TransferWindow = t.TTL / 10
	cfg.WaitTimeout = t.Renew / 4
	return cfg
}

// connectRedis returns a client of addr whose connection is established,
// with hook added when it is not nil.
func connectRedis(ctx context.Context, addr string, hook *rtHook) (*redis.Client, error) {
	c := redis.NewClient(redisOptions(addr))
	if hook != nil {
		c.AddHook(hook)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return c, nil
}

type herdNode struct {
	client *redis.Client
	cfg    masterelection.Config
	acq    chan time.Time

	mu sync.Mutex
	m  *masterelection.MasterElection // set by start
}

func (n *herdNode) start(ctx context.Context) error {
	m, err := masterelection.New(n.client, n.cfg)
	if err != nil {
		return err
	}
	m.OnMasterAcquired(func(context.Context, int64) { stamp(n.acq) })
	n.mu.Lock()
	n.m = m
	n.mu.Unlock()
	return m.Start(ctx)
}

func (n *herdNode) acquired() <-chan time.Time { return n.acq }

func (n *herdNode) election() *masterelection.MasterElection {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.m
}

func (n *herdNode) leader() bool {
	m := n.election()
	return m != nil && m.IsMaster()
}

func (n *herdNode) stop(ctx context.Context) error {
	var err error
	if m := n.election(); m != nil {
		err = m.Stop(ctx)
	}
	if cerr := n.client.Close(); cerr != nil && !errors.Is(cerr, redis.ErrClosed) && err == nil {
		err = cerr
	}
	return err
}

func (n *herdNode) crash() { _ = n.client.Close() }

// seqHook records what a client sends: the commands of its command path
// in order (a pipeline or transaction as one bracketed entry, one round
// trip) and the connections it dials (a subscription's among them).
type seqHook struct {
	mu    sync.Mutex
	sent  []string
	dials int
}

func (h *seqHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		h.dials++
		h.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (h *seqHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *seqHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		h.add("[" + strings.Join(names, " ") + "]")
		return next(ctx, cmds)
	}
}

func (h *seqHook) add(s string) {
	h.mu.Lock()
	h.sent = append(h.sent, s)
	h.mu.Unlock()
}

// String is "<n> round trips on the command path (a, b, [c d]), <k>
// connections dialled".
func (h *seqHook) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("%d round trips on the command path (%s), %d connections dialled", len(h.sent), strings.Join(h.sent, ", "), h.dials)
}
