package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/integration/internal/faults"
	"github.com/herdkit/herd/masterelection"
)

// forms records, for each EVAL and EVALSHA a client sends, the name the
// node's hook gives its script.
type forms struct {
	mu   sync.Mutex
	seen map[[2]string]bool // {"eval" or "evalsha", lockScript's name}
}

func (f *forms) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *forms) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *forms) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "eval" || name == "evalsha" {
			f.mu.Lock()
			f.seen[[2]string{name, lockScript(name, cmd.Args())}] = true
			f.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// TestStartsFirstCallIsLabelledAcquireRegister: the call by which Start
// takes the lock (Start's questions fused with its first acquire and
// registration) is recorded as faults.AcquireRegister, whether go-redis
// sends it as EVALSHA or, on a server that does not have the script yet,
// as EVAL: the oracle excuses a lost acquire's master entry only by such a
// record.
func TestStartsFirstCallIsLabelledAcquireRegister(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	f := &forms{seen: map[[2]string]bool{}}
	c.AddHook(f)
	m, err := masterelection.New(c, masterelection.Config{LockName: "label", NodeID: "n1", LockTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.IsMaster() {
		t.Fatal("Start returned without the lock on an empty server")
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, form := range []string{"evalsha", "eval"} {
		if !f.seen[[2]string{form, faults.AcquireRegister}] {
			t.Errorf("no %s labelled %q among %v", form, faults.AcquireRegister, f.seen)
		}
	}
}
