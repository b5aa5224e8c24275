package masterelection

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

// registryPutAfterRelease is a go-redis hook that, once armed, makes a
// registry write (registry_put.lua) and the release of the lock cross: the
// release waits until a registry write has been sent, and that write
// reaches Redis only once the lock key is gone. So the write that a change
// of candidacy sets off lands after the hand-over released the lock, as it
// can on a busy machine.
type registryPutAfterRelease struct {
	armed   atomic.Bool
	putSent chan struct{}
	once    sync.Once
	mr      *miniredis.Miniredis
	lock    string
}

func (h *registryPutAfterRelease) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *registryPutAfterRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *registryPutAfterRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() {
			return next(ctx, cmd)
		}
		switch scriptOf(cmd) {
		case rdb.ReleaseSHA:
			select {
			case <-h.putSent:
			case <-time.After(2 * time.Second):
			}
		case rdb.RegistryPutSHA:
			h.once.Do(func() { close(h.putSent) })
			for deadline := time.Now().Add(2 * time.Second); h.mr.Exists(h.lock) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		return next(ctx, cmd)
	}
}

// TestPausedMasterRaisesNoAlarm: a master paused by SetCandidate(false)
// hands over, and its entry, written again to say it no longer contends,
// may reach Redis after the release: Redis stores it as a slave's, which is
// what the process is by then. No error event reports it.
func TestPausedMasterRaisesNoAlarm(t *testing.T) {
	w := newWorld(t)
	hook := &registryPutAfterRelease{mr: w.mr, lock: "test:master", putSent: make(chan struct{})}
	a := w.nodeWith(testConfig("a"), hook)
	w.start(a)
	w.registered(a, "master")
	hook.armed.Store(true)
	a.SetCandidate(false)
	a.rec.waitPrefix(t, "started", "acquired", "completed:master", "lost")
	waitFor(t, "a's entry says slave", func() bool {
		e := w.mr.HGet(a.keys.Processes, "a")
		return strings.Contains(e, `"role":"slave"`) && !a.IsMaster()
	})
	// Stop delivers every event emitted before it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, err := range a.rec.errors() {
		if errors.Is(err, registry.ErrNotMaster) {
			t.Errorf("error event for the entry written after the hand-over: %v", err)
		}
	}
}
