package pubsub_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/pubsub"
)

// rawSubscribe subscribes a plain go-redis PubSub to channel and waits for
// the confirmation, so that the test sees exactly what was published.
func rawSubscribe(t testing.TB, c redis.UniversalClient, channel string) *redis.PubSub {
	t.Helper()
	ps := c.Subscribe(testCtx(t), channel)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.ReceiveTimeout(testCtx(t), waitLimit); err != nil {
		t.Fatalf("subscribe %q: %v", channel, err)
	}
	return ps
}

func rawReceive(t testing.TB, ps *redis.PubSub) *redis.Message {
	t.Helper()
	m, err := ps.ReceiveTimeout(testCtx(t), waitLimit)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	msg, ok := m.(*redis.Message)
	if !ok {
		t.Fatalf("received %T, want a message", m)
	}
	return msg
}

func TestSendEnvelope(t *testing.T) {
	mr, c := newMini(t)
	now := time.Date(2025, 11, 22, 0, 6, 40, 123456789, time.UTC)
	mr.SetTime(now) // acquire.lua mints the server's TIME in ms: 1763770000123
	fc := clock.NewFake(now)
	r := newRouter(t, c, newMaster(t, c, "master-1", pubsub.Config{}), nil, pubsub.WithClock(pubsub.Config{}, fc))
	ps := rawSubscribe(t, c, "worker:slave:s1")

	mustSend(t, r, "s1", "assign", map[string]int{"camera": 3})
	raw := rawReceive(t, ps)
	if raw.Channel != "worker:slave:s1" {
		t.Errorf("channel %q", raw.Channel)
	}
	var w map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw.Payload), &w); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"from": `"master-1"`, "term": `1763770000123`, "type": `"assign"`, "payload": `{"camera":3}`, "sentAt": `"2025-11-22T00:06:40.123Z"`}
	for k, v := range want {
		if string(w[k]) != v {
			t.Errorf("%s = %s, want %s", k, w[k], v)
		}
	}
	var id string
	if err := json.Unmarshal(w["id"], &id); err != nil || uuid.Validate(id) != nil {
		t.Errorf("id %s is not a UUID", w["id"])
	}
	if len(w) != 6 {
		t.Errorf("envelope has %d members, want 6: %s", len(w), raw.Payload)
	}

	mustSend(t, r, "s1", "raw", json.RawMessage(`[1, 2]`))
	if m, err := pubsub.ParseMessage([]byte(rawReceive(t, ps).Payload)); err != nil || string(m.Payload) != `[1,2]` || m.ID == id {
		t.Errorf("raw payload: %+v, %v", m, err)
	}
	mustSend(t, r, "s1", "nil", nil)
	if m, err := pubsub.ParseMessage([]byte(rawReceive(t, ps).Payload)); err != nil || string(m.Payload) != `null` {
		t.Errorf("nil payload: %+v, %v", m, err)
	}

	custom := newRouter(t, c, newMaster(t, c, "master-1", pubsub.Config{LockName: "jobs"}), nil, pubsub.Config{LockName: "jobs", SlavePrefix: "jobs:"})
	ps2 := rawSubscribe(t, c, "jobs:s1")
	mustSend(t, custom, "s1", "t", 1)
	if m := rawReceive(t, ps2); m.Channel != "jobs:s1" {
		t.Errorf("custom prefix: channel %q", m.Channel)
	}
}

func TestSendErrors(t *testing.T) {
	_, c := newMini(t)
	mastership := newMaster(t, c, "master-1", pubsub.Config{})
	term := mastership.Term()
	r := newRouter(t, c, mastership, nil, pubsub.Config{})
	rawSubscribe(t, c, "worker:slave:s1")

	// term is 0 where the mastership says it is not master, and the term it holds
	// the lock under everywhere else.
	tests := []struct {
		name    string
		term    int64
		slave   string
		typ     string
		payload any
		want    error
		errHas  string
	}{
		{name: "not master", term: 0, slave: "s1", typ: "t", want: pubsub.ErrNotMaster},
		{name: "no subscriber", term: term, slave: "gone", typ: "t", want: pubsub.ErrNoSubscriber, errHas: `"gone"`},
		{name: "slave id with a glob character", term: term, slave: "s*", typ: "t", want: pubsub.ErrInvalidName, errHas: "glob character '*'"},
		{name: "slave id with a bracket", term: term, slave: "s[1]", typ: "t", want: pubsub.ErrInvalidName, errHas: "glob"},
		{name: "empty slave id", term: term, slave: "", typ: "t", want: pubsub.ErrInvalidName, errHas: "slave id is empty"},
		{name: "slave id too long", term: term, slave: strings.Repeat("s", 300), typ: "t", want: pubsub.ErrInvalidName, errHas: "300 bytes"},
		{name: "empty type", term: term, slave: "s1", typ: "", want: pubsub.ErrInvalidName, errHas: "message type is empty"},
		{name: "type with a question mark", term: term, slave: "s1", typ: "what?", want: pubsub.ErrInvalidName, errHas: "glob"},
		{name: "payload too large", term: term, slave: "s1", typ: "t", payload: strings.Repeat("x", pubsub.MaxPayloadSize), want: pubsub.ErrPayloadTooLarge, errHas: "1048578 bytes"},
		{name: "raw payload too large", term: term, slave: "s1", typ: "t", payload: json.RawMessage(`"` + strings.Repeat("x", pubsub.MaxPayloadSize) + `"`), want: pubsub.ErrPayloadTooLarge},
		{name: "raw payload not JSON", term: term, slave: "s1", typ: "t", payload: json.RawMessage(`{oops`), want: pubsub.ErrInvalidPayload, errHas: "{oops"},
		{name: "payload json cannot encode", term: term, slave: "s1", typ: "t", payload: math.Inf(1), want: pubsub.ErrInvalidPayload},
		{name: "payload of a func", term: term, slave: "s1", typ: "t", payload: func() {}, want: pubsub.ErrInvalidPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mastership.set(tt.term)
			err := r.Send(testCtx(t), tt.slave, tt.typ, tt.payload)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("error %q does not mention %q", err, tt.errHas)
			}
		})
	}

	mastership.set(term)
	var nse *pubsub.NoSubscriberError
	if err := r.Send(testCtx(t), "gone", "t", nil); !errors.As(err, &nse) || nse.SlaveID != "gone" {
		t.Errorf("errors.As NoSubscriberError: %v", err)
	}

	// IsMaster true but the term already 0: the election fenced itself.
	mastership.master.Store(true)
	mastership.term.Store(0)
	if err := r.Send(testCtx(t), "s1", "t", nil); !errors.Is(err, pubsub.ErrNotMaster) {
		t.Errorf("term 0: %v", err)
	}

	// A Redis error is wrapped, not swallowed.
	mastership.set(term)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Send(ctx, "s1", "t", nil); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"s1"`) {
		t.Errorf("cancelled ctx: %v", err)
	}
}

func TestNewRouterErrors(t *testing.T) {
	_, c := newMini(t)
	tests := []struct {
		name       string
		client     redis.UniversalClient
		mastership pubsub.Mastership
		cfg        pubsub.Config
		errHas     string
	}{
		{"nil client", nil, newMastership("n", 1), pubsub.Config{}, "client is nil"},
		{"typed nil client", (*redis.Client)(nil), newMastership("n", 1), pubsub.Config{}, "client is nil"},
		{"typed nil cluster client", (*redis.ClusterClient)(nil), newMastership("n", 1), pubsub.Config{}, "client is nil"},
		{"nil mastership", c, nil, pubsub.Config{}, "mastership is nil"},
		{"bad node id", c, newMastership("n*", 1), pubsub.Config{}, "glob"},
		{"bad prefix", c, newMastership("n", 1), pubsub.Config{SlavePrefix: "worker slave:"}, "SlavePrefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := pubsub.NewRouter(tt.client, tt.mastership, nil, tt.cfg)
			if err == nil || r != nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("got %v, %v; want an error mentioning %q", r, err, tt.errHas)
			}
		})
	}
}

func TestBroadcast(t *testing.T) {
	_, c := newMini(t)
	mastership := newMaster(t, c, "master-1", pubsub.Config{})
	term := mastership.Term()
	lister := &slaveList{ids: []string{"s1", "master-1", "s2", "s1", "gone", "bad*id", "gone2"}}
	r := newRouter(t, c, mastership, lister, pubsub.Config{})
	ps1 := rawSubscribe(t, c, "worker:slave:s1")
	ps2 := rawSubscribe(t, c, "worker:slave:s2")
	self := rawSubscribe(t, c, "worker:slave:master-1")

	n, err := r.Broadcast(testCtx(t), "reload", map[string]bool{"all": true})
	if n != 2 {
		t.Errorf("delivered %d, want 2", n)
	}
	if !errors.Is(err, pubsub.ErrNoSubscriber) || !errors.Is(err, pubsub.ErrInvalidName) {
		t.Errorf("error %v should report the missing slaves and the bad id", err)
	}
	if got := pubsub.NoSubscribers(err); strings.Join(got, ",") != "gone,gone2" {
		t.Errorf("NoSubscribers = %q", got)
	}
	m1, _ := pubsub.ParseMessage([]byte(rawReceive(t, ps1).Payload))
	m2, _ := pubsub.ParseMessage([]byte(rawReceive(t, ps2).Payload))
	if m1.ID == "" || m1.ID != m2.ID || m1.Term != term || m1.Type != "reload" {
		t.Errorf("broadcast envelopes %+v and %+v", m1, m2)
	}
	// Nothing reached the master's own channel, and s1 got one copy only:
	// the next message on each is a marker sent afterwards.
	for id, ps := range map[string]*redis.PubSub{"master-1": self, "s1": ps1} {
		mustSend(t, r, id, "marker", nil)
		if m, _ := pubsub.ParseMessage([]byte(rawReceive(t, ps).Payload)); m.Type != "marker" {
			t.Errorf("%s received %+v before the marker", id, m)
		}
	}

	t.Run("not master", func(t *testing.T) {
		mastership.set(0)
		defer mastership.set(term)
		if n, err := r.Broadcast(testCtx(t), "t", nil); n != 0 || !errors.Is(err, pubsub.ErrNotMaster) {
			t.Errorf("got %d, %v", n, err)
		}
	})
	t.Run("mastership lost while listing", func(t *testing.T) {
		defer mastership.set(term)
		lost := &slaveList{ids: []string{"s1"}, before: func() { mastership.set(0) }}
		r := newRouter(t, c, mastership, lost, pubsub.Config{})
		if n, err := r.Broadcast(testCtx(t), "t", nil); n != 0 || !errors.Is(err, pubsub.ErrNotMaster) {
			t.Errorf("got %d, %v", n, err)
		}
	})
	t.Run("new term while listing", func(t *testing.T) {
		defer mastership.set(term)
		moved := &slaveList{ids: []string{"s1"}, before: func() { mastership.set(term + 1) }}
		r := newRouter(t, c, mastership, moved, pubsub.Config{})
		if n, err := r.Broadcast(testCtx(t), "t", nil); n != 0 || !errors.Is(err, pubsub.ErrNotMaster) {
			t.Errorf("got %d, %v", n, err)
		}
	})
	t.Run("lister error", func(t *testing.T) {
		boom := errors.New("registry down")
		r := newRouter(t, c, mastership, &slaveList{err: boom}, pubsub.Config{})
		if n, err := r.Broadcast(testCtx(t), "t", nil); n != 0 || !errors.Is(err, boom) {
			t.Errorf("got %d, %v", n, err)
		}
	})
	t.Run("no slaves", func(t *testing.T) {
		r := newRouter(t, c, mastership, &slaveList{ids: []string{"master-1"}}, pubsub.Config{})
		if n, err := r.Broadcast(testCtx(t), "t", nil); n != 0 || err != nil {
			t.Errorf("got %d, %v", n, err)
		}
	})
	t.Run("no lister", func(t *testing.T) {
		r := newRouter(t, c, mastership, nil, pubsub.Config{})
		if _, err := r.Broadcast(testCtx(t), "t", nil); err == nil || !strings.Contains(err.Error(), "SlaveLister") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("bad type", func(t *testing.T) {
		if _, err := r.Broadcast(testCtx(t), "a b", nil); !errors.Is(err, pubsub.ErrInvalidName) {
			t.Errorf("got %v", err)
		}
	})
}
