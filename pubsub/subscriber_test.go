package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

func TestSubscriberDeliversInOrderByType(t *testing.T) {
	_, c := newMini(t)
	mastership := newMaster(t, c, "m", pubsub.Config{})
	term := mastership.Term()
	r := newRouter(t, c, mastership, nil, pubsub.Config{})
	s, other, log := startSubscriber(t, c, "s1", pubsub.Config{})
	if s.Channel() != "worker:slave:s1" {
		t.Errorf("Channel() = %q", s.Channel())
	}
	odd := make(chan pubsub.Message, 1000)
	if err := s.Handle("odd", pubsub.Chan(odd)); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		typ := "even"
		if i%2 == 1 {
			typ = "odd"
		}
		mustSend(t, r, "s1", typ, i)
	}
	for i := range n {
		ch := other
		if i%2 == 1 {
			ch = odd
		}
		m := receive(t, ch)
		var got int
		if err := m.Decode(&got); err != nil || got != i || m.From != "m" || m.Term != term {
			t.Fatalf("message %d: %+v (%v)", i, m, err)
		}
	}
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("errors reported: %v", errs)
	}
	if s.HighestTerm() != term || s.Rejected() != 0 {
		t.Errorf("HighestTerm %d, Rejected %d", s.HighestTerm(), s.Rejected())
	}
}

func TestSubscriberBadMessagesDoNotStopTheLoop(t *testing.T) {
	mr, c := newMini(t)
	mr.Set(lockKeys(pubsub.Config{}).Term, "1") // term 1 was minted: the good messages are verified
	log := newErrLog()
	s, err := pubsub.NewSubscriber(c, "s1", pubsub.Config{OnError: log.add})
	if err != nil {
		t.Fatal(err)
	}
	ok := make(chan pubsub.Message, 10)
	handlerErr := errors.New("cannot assign camera")
	for typ, h := range map[string]pubsub.Handler{
		"ok":    pubsub.Chan(ok),
		"fails": func(context.Context, pubsub.Message) error { return handlerErr },
		"panic": func(context.Context, pubsub.Message) error { panic("boom") },
	} {
		if err := s.Handle(typ, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	env := func(id string, term int64, typ, payload string) string {
		return fmt.Sprintf(`{"id":%q,"from":"m","term":%d,"type":%q,"payload":%s,"sentAt":"2025-11-22T00:06:40.123Z"}`, id, term, typ, payload)
	}
	tests := []struct {
		name    string
		publish string
		want    error
		errHas  string
	}{
		{"not JSON", "hello", pubsub.ErrMalformedEnvelope, "not a JSON object"},
		{"empty", "", pubsub.ErrMalformedEnvelope, "not a JSON object"},
		{"broken JSON", `{"id":`, pubsub.ErrMalformedEnvelope, "unexpected end"},
		{"missing type", `{"id":"x","from":"m","term":1}`, pubsub.ErrMalformedEnvelope, "type is empty"},
		{"glob in from", `{"id":"x","from":"m*","term":1,"type":"ok"}`, pubsub.ErrInvalidName, "glob"},
		{"term zero on a slave channel", env("z", 0, "ok", "1"), pubsub.ErrMalformedEnvelope, "term 0 on a slave channel"},
		{"oversized payload", env("big", 1, "ok", `"`+strings.Repeat("x", pubsub.MaxPayloadSize)+`"`), pubsub.ErrPayloadTooLarge, "limit is 1048576"},
		{"unknown type", env("u", 1, "nobody-handles-this", "1"), pubsub.ErrUnknownType, `"nobody-handles-this"`},
		{"handler error", env("f", 1, "fails", "1"), handlerErr, `message "f" of type "fails" from "m"`},
		{"handler panic", env("p", 1, "panic", "1"), pubsub.ErrHandlerPanic, "boom"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr.Publish("worker:slave:s1", tt.publish)
			err := log.next(t, tt.want)
			var me *pubsub.MessageError
			if !errors.As(err, &me) || me.Channel != "worker:slave:s1" {
				t.Errorf("not a *MessageError on the slave channel: %#v", err)
			}
			if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("error %q does not mention %q", err, tt.errHas)
			}
			// The loop goes on: a good message is still delivered.
			mr.Publish("worker:slave:s1", env("good"+strconv.Itoa(i), 1, "ok", strconv.Itoa(i)))
			if m := receive(t, ok); m.ID != "good"+strconv.Itoa(i) {
				t.Errorf("received %+v", m)
			}
		})
	}
	if n := len(log.all()); n != len(tests) {
		t.Errorf("%d errors reported for %d bad messages: %v", n, len(tests), log.all())
	}
}

func TestSubscriberTermFencing(t *testing.T) {
	mr, c := newMini(t)
	keys := keyspace.NewKeys(pubsub.DefaultLockName, false)
	mr.Set(keys.Term, "10") // the last term minted before the slave started
	s, got, log := startSubscriber(t, c, "s1", pubsub.Config{})
	if s.HighestTerm() != 10 {
		t.Fatalf("HighestTerm after Start = %d, want 10 from %q", s.HighestTerm(), keys.Term)
	}

	msg := func(id string, term int64) {
		mr.Publish("worker:slave:s1", fmt.Sprintf(`{"id":%q,"from":"m%d","term":%d,"type":"t"}`, id, term, term))
	}
	notice := func(payload string) { mr.Publish(keys.Events, payload) }
	// expect checks that the next delivered message is id.
	expect := func(id string) {
		t.Helper()
		if m := receive(t, got); m.ID != id {
			t.Fatalf("delivered %q, want %q", m.ID, id)
		}
	}

	// mint stands for acquire.lua: the terms above 10 exist only once the
	// term key holds them (the Subscriber refuses others, see verify_test.go).
	mint := func(term int) { mr.Set(keys.Term, strconv.Itoa(term)) }

	msg("old", 9) // older than the term key: rejected
	msg("same", 10)
	expect("same")
	mint(12)
	msg("newer", 12) // a message raises the fence
	expect("newer")
	msg("back", 10)
	mint(15)
	notice(`{"event":"acquired","nodeId":"n2","term":15}`)
	msg("before-15", 12)
	mint(20)
	notice(`{"event":"released","nodeId":"n2","term":20}`)
	msg("before-20", 15)
	notice(`{"event":"registered","nodeId":"s9","processId":"s9"}`) // registry notice: ignored
	notice(`{"event":"acquired","nodeId":"n3","term":"soon"}`)      // malformed: reported
	notice(`not json`)                                              // malformed: reported
	msg("at-20", 20)
	expect("at-20")
	s.ObserveTerm(30)
	s.ObserveTerm(25) // lower: ignored
	msg("before-30", 20)
	msg("at-30", 30)
	expect("at-30")

	if s.HighestTerm() != 30 || s.Rejected() != 5 {
		t.Errorf("HighestTerm %d, Rejected %d; want 30, 5", s.HighestTerm(), s.Rejected())
	}
	var stale []string
	for _, err := range log.all() {
		var se *pubsub.StaleTermError
		if errors.As(err, &se) {
			stale = append(stale, fmt.Sprintf("%s:%d<%d:%s", se.ID, se.Term, se.Highest, se.From))
		}
	}
	want := "old:9<10:m9 back:10<12:m10 before-15:12<15:m12 before-20:15<20:m15 before-30:20<30:m20"
	if strings.Join(stale, " ") != want {
		t.Errorf("stale reports\n got %s\nwant %s", strings.Join(stale, " "), want)
	}
	if n := log.count(pubsub.ErrMalformedEnvelope); n != 2 {
		t.Errorf("%d malformed notices reported, want 2: %v", n, log.all())
	}
	if n := log.count(pubsub.ErrStaleTerm); n != 5 {
		t.Errorf("%d stale errors match ErrStaleTerm, want 5", n)
	}
}

// TestStaleMasterTakeover plays the scenario the term exists for: master A
// keeps sending after its lock expired and B acquired it.
func TestStaleMasterTakeover(t *testing.T) {
	mr, c := newMini(t)
	testStaleMasterTakeover(t, c, func() { mr.FastForward(time.Minute) })
}

func TestSubscriberLifecycle(t *testing.T) {
	_, c := newMini(t)
	master := newMaster(t, c, "m", pubsub.Config{})
	t.Run("start twice, close twice, start after close", func(t *testing.T) {
		s, err := pubsub.NewSubscriber(c, "s1", pubsub.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil { // before Start: harmless
			t.Fatal(err)
		}
		s, _ = pubsub.NewSubscriber(c, "s1", pubsub.Config{})
		if err := s.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(testCtx(t)); !errors.Is(err, pubsub.ErrStarted) {
			t.Errorf("second Start: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(testCtx(t)); !errors.Is(err, pubsub.ErrClosed) {
			t.Errorf("Start after Close: %v", err)
		}
	})
	t.Run("failed start can be retried", func(t *testing.T) {
		s, _ := pubsub.NewSubscriber(c, "s1", pubsub.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Start(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Start with a cancelled ctx: %v", err)
		}
		if err := s.Start(testCtx(t)); err != nil {
			t.Errorf("Start after a failed Start: %v", err)
		}
		s.Close()
	})
	t.Run("close interrupts a blocked handler", func(t *testing.T) {
		r := newRouter(t, c, master, nil, pubsub.Config{})
		s, _ := pubsub.NewSubscriber(c, "s2", pubsub.Config{})
		entered := make(chan struct{})
		var handlerErr error
		s.HandleDefault(func(ctx context.Context, m pubsub.Message) error {
			close(entered)
			<-ctx.Done()
			handlerErr = ctx.Err()
			return nil
		})
		if err := s.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		mustSend(t, r, "s2", "t", nil)
		<-entered
		s.Close()
		if !errors.Is(handlerErr, context.Canceled) {
			t.Errorf("handler ctx ended with %v", handlerErr)
		}
	})
	t.Run("close with a full Chan", func(t *testing.T) {
		r := newRouter(t, c, master, nil, pubsub.Config{})
		log := newErrLog()
		s, _ := pubsub.NewSubscriber(c, "s3", pubsub.Config{OnError: log.add})
		full := make(chan pubsub.Message) // nobody reads
		s.HandleDefault(pubsub.Chan(full))
		if err := s.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		mustSend(t, r, "s3", "t", nil)
		s.Close()
		if n := log.count(context.Canceled); n > 1 {
			t.Errorf("%d drops reported for one message", n)
		}
	})
	t.Run("handlers can be removed", func(t *testing.T) {
		r := newRouter(t, c, master, nil, pubsub.Config{})
		s, got, log := startSubscriber(t, c, "s4", pubsub.Config{})
		s.HandleDefault(nil)
		if err := s.Handle("t", pubsub.Chan(got)); err != nil {
			t.Fatal(err)
		}
		mustSend(t, r, "s4", "other", nil)
		log.next(t, pubsub.ErrUnknownType)
		if err := s.Handle("t", nil); err != nil {
			t.Fatal(err)
		}
		mustSend(t, r, "s4", "t", nil)
		log.next(t, pubsub.ErrUnknownType)
		if err := s.Handle("bad type", nil); !errors.Is(err, pubsub.ErrInvalidName) {
			t.Errorf("Handle with a bad type: %v", err)
		}
		if len(got) != 0 {
			t.Errorf("%d messages delivered to removed handlers", len(got))
		}
	})
}

func TestNewSubscriberErrors(t *testing.T) {
	_, c := newMini(t)
	tests := []struct {
		name   string
		id     string
		cfg    pubsub.Config
		errHas string
	}{
		{"empty id", "", pubsub.Config{}, "process id is empty"},
		{"glob id", "worker-*", pubsub.Config{}, "glob character '*'"},
		{"id with a newline", "a\nb", pubsub.Config{}, "whitespace"},
		{"bad lock name", "s", pubsub.Config{LockName: "a?"}, "LockName"},
		{"negative ping", "s", pubsub.Config{PingInterval: -time.Second}, "PingInterval (-1s) is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := pubsub.NewSubscriber(c, tt.id, tt.cfg)
			if err == nil || s != nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("got %v, %v; want an error mentioning %q", s, err, tt.errHas)
			}
		})
	}
	if _, err := pubsub.NewSubscriber(nil, "s", pubsub.Config{}); err == nil {
		t.Error("nil client accepted")
	}
	var typed *redis.Client // accepted before, and panicked at Start
	if _, err := pubsub.NewSubscriber(typed, "s", pubsub.Config{}); err == nil || !strings.Contains(err.Error(), "client is nil") {
		t.Errorf("typed nil client: %v, want \"client is nil\"", err)
	}
}

// TestSubscriberSurvivesRestart restarts miniredis under a running
// subscriber: delivery resumes once go-redis has resubscribed.
func TestSubscriberSurvivesRestart(t *testing.T) {
	mr, c := newMini(t)
	testResumeAfterRestart(t, c, func() {
		mr.Close()
		if err := mr.Restart(); err != nil {
			t.Fatalf("restart miniredis: %v", err)
		}
	}, false) // miniredis keeps its data across Restart
}

type termSource struct{ term atomic.Int64 }

func (s *termSource) ObservedTerm() int64 { return s.term.Load() }

// TestSubscriberTermSource: the Terms source raises the fence for messages
// the subscriber judges, without any notice on its connection.
func TestSubscriberTermSource(t *testing.T) {
	_, c := newMini(t)
	src := &termSource{}
	s, got, log := startSubscriber(t, c, "s1", pubsub.Config{Terms: src})
	old := newMaster(t, c, "old", pubsub.Config{})
	term := old.Term()
	r := newRouter(t, c, old, nil, pubsub.Config{})
	mustSend(t, r, "s1", "t", nil)
	receive(t, got)
	src.term.Store(term + 1) // the election's check saw a newer master
	// A message of the old master that bypassed the route script.
	bypass(t, c, s.Channel(), pubsub.Message{ID: "late", From: "old", Term: term, Type: "t"})
	var se *pubsub.StaleTermError
	if err := log.next(t, pubsub.ErrStaleTerm); !errors.As(err, &se) || se.Highest != term+1 || se.Term != term || se.ID != "late" {
		t.Errorf("got %v", err)
	}
	if s.HighestTerm() != term+1 || s.Rejected() != 1 {
		t.Errorf("HighestTerm %d, Rejected %d", s.HighestTerm(), s.Rejected())
	}
}

// TestSubscriberHandlesOnlyWhileItHoldsItsID: with Config.Holds, routed
// messages that arrive while Holds says no (a twin refused, a process that
// stepped aside) are dropped unhandled and counted; once it says yes they
// are handled again.
func TestSubscriberHandlesOnlyWhileItHoldsItsID(t *testing.T) {
	_, c := newMini(t)
	master := newMaster(t, c, "m", pubsub.Config{})
	r := newRouter(t, c, master, nil, pubsub.Config{})
	var holds atomic.Bool
	s, got, _ := startSubscriber(t, c, "s1", pubsub.Config{Holds: holds.Load})
	mustSend(t, r, "s1", "seq", 1)
	mustSend(t, r, "s1", "seq", 2)
	deadline := time.Now().Add(5 * time.Second)
	for s.NotHeld() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("NotHeld = %d, want 2", s.NotHeld())
		}
		time.Sleep(time.Millisecond)
	}
	holds.Store(true)
	mustSend(t, r, "s1", "seq", 3)
	var v int
	if err := receive(t, got).Decode(&v); err != nil || v != 3 {
		t.Fatalf("first message handled: %d, %v; want 3 (1 and 2 dropped)", v, err)
	}
}
