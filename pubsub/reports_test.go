package pubsub_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/pubsub"
)

func TestReportToMaster(t *testing.T) {
	_, c := newMini(t)
	slave, err := pubsub.NewSubscriber(c, "slave-1", pubsub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// No Reports yet: nobody received the report.
	if err := slave.ReportToMaster(testCtx(t), "status", nil); !errors.Is(err, pubsub.ErrNoSubscriber) || !strings.Contains(err.Error(), "master-election:master-inbox") {
		t.Fatalf("report without a Reports: %v", err)
	}

	mastership := newMastership("master-1", 3)
	log := newErrLog()
	rep, err := pubsub.NewReports(c, mastership, pubsub.Config{OnError: log.add})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Channel() != "master-election:master-inbox" || rep.Channel() != (pubsub.Config{}).MasterInbox() {
		t.Errorf("Channel() = %q", rep.Channel())
	}
	status := make(chan pubsub.Message, 10)
	other := make(chan pubsub.Message, 10)
	if err := rep.Handle("status", pubsub.Chan(status)); err != nil {
		t.Fatal(err)
	}
	rep.HandleDefault(pubsub.Chan(other))
	if err := rep.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer rep.Close()

	if err := slave.ReportToMaster(testCtx(t), "status", map[string]int{"load": 42}); err != nil {
		t.Fatal(err)
	}
	m := receive(t, status)
	var p struct{ Load int }
	if err := m.Decode(&p); err != nil || m.From != "slave-1" || m.Term != 0 || m.Type != "status" || p.Load != 42 || m.SentAt.IsZero() {
		t.Errorf("report %+v, payload %+v, %v", m, p, err)
	}
	if err := slave.ReportToMaster(testCtx(t), "done", "job-9"); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, other); m.Type != "done" || m.From != "slave-1" {
		t.Errorf("default handler got %+v", m)
	}

	// Not master: reports are dropped and counted.
	mastership.set(0)
	if err := slave.ReportToMaster(testCtx(t), "status", nil); err != nil {
		t.Fatal(err) // the Reports is listening, so PUBLISH reached it
	}
	err = log.next(t, pubsub.ErrNotMaster)
	var me *pubsub.MessageError
	if !errors.As(err, &me) || me.From != "slave-1" || rep.Dropped() != 1 {
		t.Errorf("drop: %v, Dropped %d", err, rep.Dropped())
	}
	mastership.set(4)

	// Bad input on the sender side never reaches Redis.
	for _, tt := range []struct {
		typ     string
		payload any
		want    error
	}{
		{"st*tus", nil, pubsub.ErrInvalidName},
		{"status", make(chan int), pubsub.ErrInvalidPayload},
		{"status", strings.Repeat("x", pubsub.MaxPayloadSize), pubsub.ErrPayloadTooLarge},
	} {
		if err := slave.ReportToMaster(testCtx(t), tt.typ, tt.payload); !errors.Is(err, tt.want) {
			t.Errorf("ReportToMaster(%q): %v, want %v", tt.typ, err, tt.want)
		}
	}
	// Bad input on the wire is reported and skipped.
	if err := c.Publish(testCtx(t), rep.Channel(), "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	log.next(t, pubsub.ErrMalformedEnvelope)
	if err := slave.ReportToMaster(testCtx(t), "status", 1); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, status); string(m.Payload) != "1" {
		t.Errorf("after garbage: %+v", m)
	}
}

func TestReportsWithoutMastershipDeliversAll(t *testing.T) {
	_, c := newMini(t)
	rep, err := pubsub.NewReports(c, nil, pubsub.Config{LockName: "cams", Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Channel() != "{cams}:master-inbox" {
		t.Errorf("Channel() = %q", rep.Channel())
	}
	got := make(chan pubsub.Message, 1)
	rep.HandleDefault(pubsub.Chan(got))
	if err := rep.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	slave, _ := pubsub.NewSubscriber(c, "s", pubsub.Config{LockName: "cams", Cluster: true})
	if err := slave.ReportToMaster(testCtx(t), "hello", nil); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, got); m.From != "s" {
		t.Errorf("got %+v", m)
	}
	if _, err := pubsub.NewReports(nil, nil, pubsub.Config{}); err == nil {
		t.Error("nil client accepted")
	}
	var typed *redis.Client
	if _, err := pubsub.NewReports(typed, nil, pubsub.Config{}); err == nil || !strings.Contains(err.Error(), "client is nil") {
		t.Errorf("typed nil client: %v, want \"client is nil\"", err)
	}
	if _, err := pubsub.NewReports(c, nil, pubsub.Config{MaxRetryDelay: -1}); err == nil {
		t.Error("bad config accepted")
	}
}
