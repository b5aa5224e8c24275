package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Env is the Redis server a run measures, and the names it uses there.
// Its methods are safe for concurrent use.
type Env struct {
	// Addr is the server's host:port, for the record.
	Addr string
	// Prefix starts every lock name the run uses ("herdbench-<nanoseconds>"),
	// so Cleanup can find and remove its keys on a shared server.
	Prefix string

	opts *redis.Options
	seq  atomic.Int64
}

// NewEnv returns an environment on the server that opts point to. The
// options are copied; ContextTimeoutEnabled is set, as herd requires.
func NewEnv(opts *redis.Options) *Env {
	o := *opts
	o.ContextTimeoutEnabled = true
	return &Env{
		Addr:   o.Addr,
		Prefix: fmt.Sprintf("herdbench-%d", time.Now().UnixNano()),
		opts:   &o,
	}
}

// ClientOptions are the options herdbench uses for addr: ContextTimeoutEnabled
// (herd's deadlines hold only with it), no CLIENT SETINFO and no maintenance
// notifications (not every server has them), go-redis defaults otherwise.
func ClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
}

// ParseAddr turns REDIS_ADDR (host:port or a redis:// URL) into client
// options with ClientOptions' settings.
func ParseAddr(addr string) (*redis.Options, error) {
	if !strings.Contains(addr, "://") {
		if _, _, ok := strings.Cut(addr, ":"); !ok || strings.TrimSpace(addr) != addr {
			return nil, fmt.Errorf("redis address %q is neither host:port nor a redis:// URL", addr)
		}
		return ClientOptions(addr), nil
	}
	o, err := redis.ParseURL(addr)
	if err != nil {
		return nil, fmt.Errorf("redis address %q: %w", addr, err)
	}
	base := ClientOptions(o.Addr)
	o.ContextTimeoutEnabled = true
	o.DisableIdentity = true
	o.MaintNotificationsConfig = base.MaintNotificationsConfig
	return o, nil
}

// NewClient returns a new client of the server, as one more process would
// have. The caller closes it.
func (e *Env) NewClient() *redis.Client {
	o := *e.opts
	return redis.NewClient(&o)
}

// LockName returns a lock name no other part of the run uses, starting
// with Prefix.
func (e *Env) LockName(what string) string {
	return fmt.Sprintf("%s-%s-%d", e.Prefix, what, e.seq.Add(1))
}

// Cleanup deletes every key whose name starts with Prefix (a Cluster hash
// tag "{" in front included).
func (e *Env) Cleanup(ctx context.Context, c redis.UniversalClient) error {
	for _, pattern := range []string{e.Prefix + "*", "{" + e.Prefix + "*"} {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			err := c.Del(ctx, batch...).Err()
			batch = batch[:0]
			return err
		}
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := flush(); err != nil {
					return fmt.Errorf("delete benchmark keys: %w", err)
				}
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("scan benchmark keys: %w", err)
		}
		if err := flush(); err != nil {
			return fmt.Errorf("delete benchmark keys: %w", err)
		}
	}
	return nil
}

// readMessages calls handle with each message of ch, a subscription's
// channel, until ctx ends or ch is closed.
func readMessages(ctx context.Context, ch <-chan *redis.Message, handle func(*redis.Message)) {
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			handle(m)
		}
	}
}
