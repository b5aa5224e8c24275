package masterelection

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
)

// TestStopCtxEndsBeforeHandlers: on a real server, Stop with a ctx that
// ends while an OnMasterAcquired handler ignores its own ctx releases the
// lock all the same (another process can be master) and says so: the error
// wraps ErrHandlersRunning and ctx's error and says the lock was released
// while a handler still ran. Before, the error said only that the handlers
// were still running.
func TestStopCtxEndsBeforeHandlers(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	m, err := New(c, testConfig("a"))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	returned := make(chan struct{})
	m.OnMasterAcquired(func(context.Context, int64) {
		defer close(returned)
		<-release // ignores its ctx
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil || !m.IsMaster() {
		t.Fatalf("Start = %v, IsMaster %v", err, m.IsMaster())
	}
	stopCtx, cancelStop := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancelStop()
	stopErr := make(chan error, 1)
	go func() { stopErr <- m.Stop(stopCtx) }()
	var got error
	select {
	case got = <-stopErr:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Stop did not return after its ctx ended")
	}
	if !errors.Is(got, ErrHandlersRunning) || !errors.Is(got, context.DeadlineExceeded) ||
		!strings.Contains(got.Error(), "the lock was released while an OnMasterAcquired handler still ran") {
		t.Errorf("Stop = %v; want ErrHandlersRunning and DeadlineExceeded, saying the lock was released", got)
	}
	if m.IsMaster() {
		t.Error("IsMaster after Stop")
	}
	if n, _ := c.Exists(t.Context(), m.Keys().Master).Result(); n != 0 {
		t.Error("the lock is still held: Stop said it released it")
	}
	// The old handler still runs while another process takes the lock.
	b, err := New(c, testConfig("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()
	if err := b.Start(ctx); err != nil || !b.IsMaster() {
		t.Fatalf("b Start = %v, IsMaster %v", err, b.IsMaster())
	}
	select {
	case <-returned:
		t.Fatal("the handler returned before it was let go")
	default:
	}
	close(release)
	<-returned
}
