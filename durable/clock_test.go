package durable_test

import (
	"testing"
	"time"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/clock"
)

// Send stamps sentAt from the Router's clock.
func TestSendStampsSentAtOnTheRoutersClock(t *testing.T) {
	_, c := newMini(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	r := newRouter(t, c, newMaster(t, c, "master-1"), nil, durable.WithClock(fast(), clock.NewFake(at)))
	_, got, _ := startConsumer(t, c, "s1", fast())
	if _, err := r.Send(testCtx(t), "s1", "job", 1); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, got); !d.SentAt.Equal(at) {
		t.Fatalf("SentAt %v, want the Router's clock's %v", d.SentAt, at)
	}
}
