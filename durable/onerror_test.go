package durable_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/tcpfault"
	"github.com/herdkit/herd/pubsub"
)

// logRecords is a slog.Handler that keeps every record's message.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecords) count(part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, part) {
			n++
		}
	}
	return n
}

// TestRedisFailureReportedOnlyWhenItLasts: a connection cut under the
// Consumer's blocked read (its client does not retry) fails one read; the
// next read succeeds and the entries go on, so OnError is not called and
// the failure shows in the debug log only. A Redis that stays away fails
// the read again, and that goes to OnError as pubsub.ErrConnection.
func TestRedisFailureReportedOnlyWhenItLasts(t *testing.T) {
	m, admin := newMini(t)
	proxy := tcpfault.New(t, m.Addr())
	opts := clientOptions(proxy.Addr())
	opts.MaxRetries = -1 // the Consumer sees every failure
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	r := newRouter(t, admin, newMaster(t, admin, "m"), nil, fast())
	logs := &logRecords{}
	cfg := fast()
	cfg.Slog = slog.New(logs)
	con, got, errs := startConsumer(t, c, "s1", cfg)

	send := func(what string) string {
		t.Helper()
		id, err := r.Send(testCtx(t), "s1", "work", what)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	handledNext := func(id string) {
		t.Helper()
		if d := receive(t, got); d.ID != id {
			t.Fatalf("handled %s; want %s", d.ID, id)
		}
	}
	handledNext(send("before"))
	eventually(t, "the entry acknowledged", func() bool { return con.Handled() == 1 })
	// A cut meets a call in flight, or an idle connection the pool then
	// replaces unseen: cut until a call failed.
	failed := func() bool { return logs.count("redis call failed")+len(errs.all()) > 0 }
	for attempt := 0; !failed(); attempt++ {
		if attempt == 50 {
			t.Fatal("no cut made a call fail")
		}
		proxy.Cut()
		for wait := time.Now(); !failed() && time.Since(wait) < time.Second; {
			time.Sleep(5 * time.Millisecond)
		}
	}
	after := send("after")
	for d := receive(t, got); d.ID != after; d = receive(t, got) {
	}
	for _, err := range errs.all() {
		t.Errorf("a failure healed by the next call is no error: OnError(%v)", err)
	}

	m.Close() // Redis stays away: every call fails from now on
	proxy.Cut()
	eventually(t, "a lasting failure is reported", func() bool { return errs.count(pubsub.ErrConnection) > 0 })
	_ = con.Close()
}
