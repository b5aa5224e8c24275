package durable_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// sendKeys records the KEYS of every inbox_send call on a client: the
// script calls whose keys name the set of inboxes.
type sendKeys struct {
	inboxes string
	mu      sync.Mutex
	calls   [][]string
}

func (h *sendKeys) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sendKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(args) > 3 {
			n, _ := args[2].(int)
			var keys []string
			for _, a := range args[3:min(3+n, len(args))] {
				s, _ := a.(string)
				keys = append(keys, s)
			}
			if slices.Contains(keys, h.inboxes) {
				h.mu.Lock()
				h.calls = append(h.calls, keys)
				h.mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *sendKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestIntegrationSendsCheckDeadlinesOnAnEmulatedRegistry: a Router on an
// election whose registry is emulated checks the registry's deadlines, so
// a slave whose entry is still in the hash past its deadline is refused as
// not registered; on a backend whose entries Redis expires itself (native
// and hpexpire, where the server runs them) the send leaves the deadlines
// key out, as the registry's own reads do.
func TestIntegrationSendsCheckDeadlinesOnAnEmulatedRegistry(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		for _, backend := range []registry.Backend{registry.BackendEmulated, registry.BackendNative, registry.BackendHPExpire} {
			t.Run(string(backend), func(t *testing.T) {
				c := redis.NewClient(clientOptions(inst.Addr))
				t.Cleanup(func() { _ = c.Close() })
				if err := c.FlushAll(testCtx(t)).Err(); err != nil {
					t.Fatal(err)
				}
				if backend != registry.BackendEmulated {
					native, hpexpire, err := rdb.RegistryProbe(testCtx(t), c, keys())
					if err != nil {
						t.Fatal(err)
					}
					if runs := map[registry.Backend]bool{registry.BackendNative: native, registry.BackendHPExpire: hpexpire}; !runs[backend] {
						t.Skipf("%s does not run the %s backend", srv.Name, backend)
					}
				}
				cfg := electionConfig("m")
				cfg.RegistryBackend = backend
				e, err := masterelection.New(c, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Start(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
					defer cancel()
					_ = e.Stop(ctx)
				})
				if !e.IsMaster() {
					t.Fatal("the only candidate is not master")
				}
				k := e.Keys()
				hook := &sendKeys{inboxes: k.Inboxes}
				c.AddHook(hook)
				r := newRouter(t, c, e, nil, fast())
				register(t, c, "s1")
				if _, err := r.Send(testCtx(t), "s1", "work", 1); err != nil {
					t.Fatalf("send to a registered slave: %v", err)
				}
				hook.mu.Lock()
				calls := slices.Clone(hook.calls)
				hook.mu.Unlock()
				if len(calls) == 0 {
					t.Fatal("no inbox_send call recorded")
				}
				named := slices.Contains(calls[len(calls)-1], k.ProcessesExpiry)
				if want := backend == registry.BackendEmulated; named != want {
					t.Errorf("send's keys %q name the deadlines key: %v; want %v", calls[len(calls)-1], named, want)
				}
				if backend != registry.BackendEmulated {
					return
				}
				// late's entry is in the hash, its deadline passed: what the
				// emulated registry holds between a death and the next read.
				// A registry read (the master's sweep) in between deletes it,
				// and the refusal then proves nothing: try again.
				for attempt := 1; ; attempt++ {
					if err := c.HSet(testCtx(t), k.Processes, "late", `{"processId":"late"}`).Err(); err != nil {
						t.Fatal(err)
					}
					if err := c.ZAdd(testCtx(t), k.ProcessesExpiry, redis.Z{Member: "late", Score: 1}).Err(); err != nil {
						t.Fatal(err)
					}
					_, err := r.Send(testCtx(t), "late", "work", 2)
					if !c.HExists(testCtx(t), k.Processes, "late").Val() {
						if attempt == 5 {
							t.Fatal("a registry read deleted late's entry around the send five times in a row: the deadline check was never seen")
						}
						continue
					}
					if !errors.Is(err, durable.ErrNotRegistered) {
						t.Errorf("send to a slave past its deadline: %v; want ErrNotRegistered", err)
					}
					break
				}
				if n := c.Exists(testCtx(t), r.Inbox("late")).Val(); n != 0 {
					t.Error("the send to a slave past its deadline created its inbox")
				}
			})
		}
	})
}
