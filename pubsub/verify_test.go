package pubsub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/pubsub"
)

// A term is a hint until Redis confirms it: a Subscriber raises its fence
// only to terms at or below the term key. The tests below forge what a
// plain client that may PUBLISH can send (no key is written), then check
// that the real master's messages still flow.

// forgedTerm is the term of the first forgery found in the field: far above
// any term herd mints (milliseconds since the epoch, until the year 287,000).
const forgedTerm = 9_000_000_000_000_000

// forgeries are the forged PUBLISHes: a lock notice on the events channel
// (event set) or an envelope on the slave channel (event empty), with a term
// far above the real master's or just one above it.
var forgeries = []struct {
	name  string
	event string
	term  func(real int64) int64
}{
	{"acquired notice with term 9e15", "acquired", func(int64) int64 { return forgedTerm }},
	{"envelope with term 9e15", "", func(int64) int64 { return forgedTerm }},
	{"acquired notice one term above", "acquired", func(real int64) int64 { return real + 1 }},
	{"released notice one term above", "released", func(real int64) int64 { return real + 1 }},
	{"envelope one term above", "", func(real int64) int64 { return real + 1 }},
}

// TestForgedTermIgnored runs every forgery on miniredis (TestIntegration
// ForgedTermIgnored runs them on every real server).
func TestForgedTermIgnored(t *testing.T) {
	for _, f := range forgeries {
		t.Run(f.name, func(t *testing.T) {
			_, c := newMini(t)
			testForgedTermIgnored(t, c, f.event, f.term)
		})
	}
}

func TestIntegrationForgedTermIgnored(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		for _, f := range forgeries {
			t.Run(f.name, func(t *testing.T) {
				c := inst.Client(t)
				if err := c.FlushAll(testCtx(t)).Err(); err != nil {
					t.Fatal(err)
				}
				testForgedTermIgnored(t, c, f.event, f.term)
			})
		}
	})
}

// testForgedTermIgnored: a master elected with acquire.lua routes to a
// slave; one forged PUBLISH (a notice of event, or an envelope when event is
// "", with the term forge gives for the real one) goes out; then the master
// routes n more messages. The slave handles all of them and not the
// forgery, its fence stays at the real term, and the forgery is reported
// once, as an *UnverifiedTermError.
func testForgedTermIgnored(t *testing.T, c redis.UniversalClient, event string, forge func(real int64) int64) {
	cfg := pubsub.Config{}
	s, got, log := startSubscriber(t, c, "slave-1", cfg)
	mastership := newMaster(t, c, "master", cfg)
	real := mastership.Term()
	r := newRouter(t, c, mastership, nil, cfg)
	mustSend(t, r, "slave-1", "work", -1)
	if m := receive(t, got); m.Term != real {
		t.Fatalf("first message %+v, want term %d", m, real)
	}

	forged := forge(real)
	channel := s.Channel()
	if event != "" {
		channel = lockKeys(cfg).Events
		notice := fmt.Sprintf(`{"event":%q,"nodeId":"evil","term":%d}`, event, forged)
		if err := c.Publish(testCtx(t), channel, notice).Err(); err != nil {
			t.Fatal(err)
		}
	} else {
		bypass(t, c, channel, pubsub.Message{ID: "forged", From: "evil", Term: forged, Type: "work", Payload: json.RawMessage(`"forged"`)})
	}

	const n = 50
	for i := range n {
		mustSend(t, r, "slave-1", "work", i)
	}
	expectHandled(t, got, log, "master", n)

	if h := s.HighestTerm(); h != real {
		t.Errorf("HighestTerm %d after the forgery, want the real term %d", h, real)
	}
	if s.Rejected() != 0 || s.Unverified() != 1 {
		t.Errorf("Rejected %d, Unverified %d; want 0 and 1", s.Rejected(), s.Unverified())
	}
	errs := log.all()
	var ue *pubsub.UnverifiedTermError
	if len(errs) != 1 || !errors.As(errs[0], &ue) || !errors.Is(errs[0], pubsub.ErrUnverifiedTerm) {
		t.Fatalf("reported %v; want one *UnverifiedTermError", errs)
	}
	if ue.Term != forged || ue.Stored != real || ue.From != "evil" || ue.Channel != channel || ue.Err != nil {
		t.Errorf("reported %+v; want term %d above %d from evil on %q", ue, forged, real, channel)
	}
	wantType, wantID := event, "" // a notice
	if event == "" {
		wantType, wantID = "work", "forged"
	}
	if ue.Type != wantType || ue.ID != wantID {
		t.Errorf("reported type %q, id %q; want %q, %q", ue.Type, ue.ID, wantType, wantID)
	}
}

// expectHandled waits until n messages from sender, with payloads 0 to n-1,
// were handled. It fails at once when a message from anyone else is handled
// or when a message is rejected for a stale term.
func expectHandled(t testing.TB, got <-chan pubsub.Message, log *errLog, sender string, n int) {
	t.Helper()
	deadline := time.After(waitLimit)
	for i := 0; i < n; {
		select {
		case m := <-got:
			var v int
			if err := m.Decode(&v); m.From != sender || err != nil || v != i {
				t.Fatalf("handled %+v (%v), want message %d from %s", m, err, i, sender)
			}
			i++
		case err := <-log.ch:
			if errors.Is(err, pubsub.ErrStaleTerm) {
				t.Fatalf("message %d of %s refused: %v", i, sender, err)
			}
		case <-deadline:
			t.Fatalf("%d of %d messages of %s handled; errors %v", i, n, sender, log.all())
		}
	}
}

// TestNewMasterAccepted: terms verified by Redis raise the fence, and the
// old master is fenced as before (miniredis; TestIntegrationNewMasterAccepted
// on every real server).
func TestNewMasterAccepted(t *testing.T) {
	_, c := newMini(t)
	testNewMasterAccepted(t, c)
}

func TestIntegrationNewMasterAccepted(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		testNewMasterAccepted(t, redistest.Start(t, srv).Client(t))
	})
}

// testNewMasterAccepted: master A routes; B takes over with acquire.lua
// (its notice is verified) and routes; a message of A's term is then stale.
// Then C becomes master without a notice reaching the slave (the keys are
// written directly, as if the notice was lost): C's first message is
// verified against the term key and accepted, and B's term is stale.
func testNewMasterAccepted(t *testing.T, c redis.UniversalClient) {
	cfg := pubsub.Config{}
	keys := lockKeys(cfg)
	s, got, log := startSubscriber(t, c, "slave-1", cfg)
	a := newMaster(t, c, "node-a", cfg)
	mustSend(t, newRouter(t, c, a, nil, cfg), "slave-1", "work", 0)
	expectHandled(t, got, log, "node-a", 1)

	termB := takeOver(t, c, cfg, "node-b")
	const n = 20
	routerB := newRouter(t, c, newMastership("node-b", termB), nil, cfg)
	for i := range n {
		mustSend(t, routerB, "slave-1", "work", i)
	}
	expectHandled(t, got, log, "node-b", n)
	if s.HighestTerm() != termB {
		t.Errorf("HighestTerm %d, want B's term %d", s.HighestTerm(), termB)
	}
	bypass(t, c, s.Channel(), pubsub.Message{ID: "late-a", From: "node-a", Term: a.Term(), Type: "work"})
	var se *pubsub.StaleTermError
	if err := log.next(t, pubsub.ErrStaleTerm); !errors.As(err, &se) || se.ID != "late-a" || se.Highest != termB {
		t.Errorf("A's message after B's term: %v", err)
	}

	termC := termB + 1000
	ctx := testCtx(t)
	if err := c.Set(ctx, keys.Master, "node-c", testLockTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, keys.Term, termC, 0).Err(); err != nil {
		t.Fatal(err)
	}
	routerC := newRouter(t, c, newMastership("node-c", termC), nil, cfg)
	for i := range n {
		mustSend(t, routerC, "slave-1", "work", i)
	}
	expectHandled(t, got, log, "node-c", n)
	bypass(t, c, s.Channel(), pubsub.Message{ID: "late-b", From: "node-b", Term: termB, Type: "work"})
	if err := log.next(t, pubsub.ErrStaleTerm); !errors.As(err, &se) || se.ID != "late-b" || se.Highest != termC {
		t.Errorf("B's message after C's term: %v", err)
	}
	if s.HighestTerm() != termC || s.Rejected() != 2 || s.Unverified() != 0 {
		t.Errorf("HighestTerm %d, Rejected %d, Unverified %d; want %d, 2, 0", s.HighestTerm(), s.Rejected(), s.Unverified(), termC)
	}
	if n := len(log.all()); n != 2 {
		t.Errorf("errors %v; want the two stale messages only", log.all())
	}
}

// getCounter is a go-redis hook that counts GET commands (the term key
// reads) and can make them fail or hang until their deadline.
type getCounter struct {
	n    atomic.Int64
	fail atomic.Pointer[error]
	hang atomic.Bool
}

func (g *getCounter) reset()     { g.n.Store(0) }
func (g *getCounter) get() int64 { return g.n.Load() }

func (g *getCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *getCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "get" {
			return next(ctx, cmd)
		}
		g.n.Add(1)
		if g.hang.Load() {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		if err := g.fail.Load(); err != nil {
			cmd.SetErr(*err)
			return *err
		}
		return next(ctx, cmd)
	}
}

func (g *getCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "get" {
				g.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestVerifyRoundTrips: on miniredis (TestIntegrationVerifyRoundTrips on
// every real server).
func TestVerifyRoundTrips(t *testing.T) {
	mr, c := newMini(t)
	sub := redis.NewClient(clientOptions(mr.Addr()))
	t.Cleanup(func() { _ = sub.Close() })
	testVerifyRoundTrips(t, c, sub)
}

func TestIntegrationVerifyRoundTrips(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		testVerifyRoundTrips(t, inst.Client(t), inst.Client(t))
	})
}

// testVerifyRoundTrips: n messages of one new term cost the slave exactly
// one GET of the term key, whether the term was announced by a notice
// (acquire.lua) or first seen on a message (keys written without a
// notice). sub is the slave's client, c everybody else's.
func testVerifyRoundTrips(t *testing.T, c, sub *redis.Client) {
	var gets getCounter
	sub.AddHook(&gets)
	cfg := pubsub.Config{}
	keys := lockKeys(cfg)
	_, got, log := startSubscriber(t, sub, "slave-1", cfg)
	const n = 200

	gets.reset()
	a := newMaster(t, c, "node-a", cfg)
	routerA := newRouter(t, c, a, nil, cfg)
	for i := range n {
		mustSend(t, routerA, "slave-1", "work", i)
	}
	expectHandled(t, got, log, "node-a", n)
	if g := gets.get(); g != 1 {
		t.Errorf("a new master's notice and %d messages cost %d GETs, want 1", n, g)
	}

	gets.reset()
	termB := a.Term() + 1000
	ctx := testCtx(t)
	if err := c.Set(ctx, keys.Master, "node-b", testLockTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, keys.Term, termB, 0).Err(); err != nil {
		t.Fatal(err)
	}
	routerB := newRouter(t, c, newMastership("node-b", termB), nil, cfg)
	for i := range n {
		mustSend(t, routerB, "slave-1", "work", i)
	}
	expectHandled(t, got, log, "node-b", n)
	if g := gets.get(); g != 1 {
		t.Errorf("%d messages of a new term cost %d GETs, want 1", n, g)
	}
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("errors %v", errs)
	}
}

// TestUnverifiedWhenTermCannotBeRead: a term the term key cannot confirm
// (missing key, garbage, read error, read timeout) is refused with an error
// that says why, raises nothing, and the loop goes on; once the key can be
// read again, the same term is verified and accepted.
func TestUnverifiedWhenTermCannotBeRead(t *testing.T) {
	injected := errors.New("injected GET failure")
	tests := []struct {
		name  string
		setup func(mr *miniredis.Miniredis, gets *getCounter)
		match error
		has   string
	}{
		{"term key missing", func(*miniredis.Miniredis, *getCounter) {}, pubsub.ErrTermMissing, "term key missing"},
		{"term key not a term", func(mr *miniredis.Miniredis, _ *getCounter) {
			_ = mr.Set(lockKeys(pubsub.Config{}).Term, "soon")
		}, pubsub.ErrUnverifiedTerm, `holds "soon", not a term`},
		{"read error", func(_ *miniredis.Miniredis, g *getCounter) { g.fail.Store(&injected) }, injected, "injected GET failure"},
		{"read timeout", func(_ *miniredis.Miniredis, g *getCounter) { g.hang.Store(true) }, context.DeadlineExceeded, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, _ := newMini(t)
			sub := redis.NewClient(clientOptions(mr.Addr()))
			t.Cleanup(func() { _ = sub.Close() })
			var gets getCounter
			sub.AddHook(&gets)
			keys := lockKeys(pubsub.Config{})
			if err := mr.Set(keys.Term, "10"); err != nil {
				t.Fatal(err)
			}
			s, got, log := startSubscriber(t, sub, "s1", pubsub.Config{OpTimeout: 50 * time.Millisecond})
			mr.Del(keys.Term)
			tt.setup(mr, &gets)

			msg := func(id string, term int64) {
				mr.Publish(s.Channel(), fmt.Sprintf(`{"id":%q,"from":"m","term":%d,"type":"t","payload":0}`, id, term))
			}
			msg("new", 12)
			mr.Publish(keys.Events, `{"event":"acquired","nodeId":"n","term":13}`)
			msg("known", 10) // the loop goes on: a verified term is handled
			if m := receive(t, got); m.ID != "known" {
				t.Fatalf("handled %+v, want the message of the verified term", m)
			}
			errs := log.all()
			if len(errs) != 2 || s.Unverified() != 2 || s.HighestTerm() != 10 {
				t.Fatalf("errors %v, Unverified %d, HighestTerm %d; want 2 refusals and 10", errs, s.Unverified(), s.HighestTerm())
			}
			for _, err := range errs {
				var ue *pubsub.UnverifiedTermError
				if !errors.As(err, &ue) || !errors.Is(err, tt.match) || ue.Stored != 0 ||
					!strings.Contains(err.Error(), "could not be verified") || !strings.Contains(err.Error(), tt.has) {
					t.Errorf("reported %v (%#v); want an *UnverifiedTermError matching %v and saying %q", err, err, tt.match, tt.has)
				}
			}

			gets.fail.Store(nil)
			gets.hang.Store(false)
			if err := mr.Set(keys.Term, "12"); err != nil {
				t.Fatal(err)
			}
			msg("retried", 12)
			if m := receive(t, got); m.ID != "retried" || s.HighestTerm() != 12 {
				t.Errorf("handled %+v, HighestTerm %d; want the message of term 12, once the key confirms it", m, s.HighestTerm())
			}
		})
	}
}

// TestTermSourceIsVerified: terms from Config.Terms and ObserveTerm are
// trusted, so messages up to them are handled without reading the term key
// (here missing, so a read would refuse them). And a read of the term key
// verifies every term up to the value read: the next new term below it
// costs no read either.
func TestTermSourceIsVerified(t *testing.T) {
	mr, _ := newMini(t)
	sub := redis.NewClient(clientOptions(mr.Addr()))
	t.Cleanup(func() { _ = sub.Close() })
	var gets getCounter
	sub.AddHook(&gets)
	src := &termSource{}
	s, got, log := startSubscriber(t, sub, "s1", pubsub.Config{Terms: src})
	msg := func(i int, term int64) {
		mr.Publish(s.Channel(), fmt.Sprintf(`{"id":"m%d","from":"m","term":%d,"type":"t","payload":%d}`, i, term, i))
	}
	gets.reset()
	src.term.Store(40)
	msg(0, 40)
	expectHandled(t, got, log, "m", 1)
	s.ObserveTerm(50)
	msg(1, 50)
	if m := receive(t, got); m.Term != 50 || gets.get() != 0 || s.HighestTerm() != 50 {
		t.Fatalf("handled %+v after %d GETs, HighestTerm %d; want term 50, no GET, 50", m, gets.get(), s.HighestTerm())
	}

	if err := mr.Set(lockKeys(pubsub.Config{}).Term, "70"); err != nil {
		t.Fatal(err)
	}
	msg(2, 60)
	msg(3, 70)
	for _, want := range []int64{60, 70} {
		if m := receive(t, got); m.Term != want {
			t.Fatalf("handled %+v, want term %d", m, want)
		}
	}
	if gets.get() != 1 || s.HighestTerm() != 70 || len(log.all()) != 0 {
		t.Errorf("%d GETs, HighestTerm %d, errors %v; want 1, 70, none", gets.get(), s.HighestTerm(), log.all())
	}
}

// TestClosingRefusesNoNotice: a lock notice read while the Subscriber
// closes (its loop's ctx ended, so the term key cannot be read) is dropped,
// not reported as unverified: the refusal would be the Subscriber's own
// doing, and an application that stops a node would see an error event.
func TestClosingRefusesNoNotice(t *testing.T) {
	mr, _ := newMini(t)
	sub := redis.NewClient(clientOptions(mr.Addr()))
	t.Cleanup(func() { _ = sub.Close() })
	keys := lockKeys(pubsub.Config{})
	if err := mr.Set(keys.Term, "10"); err != nil {
		t.Fatal(err)
	}
	s, _, log := startSubscriber(t, sub, "s1", pubsub.Config{})
	closing, cancel := context.WithCancel(context.Background())
	cancel()
	pubsub.ReadNotice(s, closing, `{"event":"acquired","nodeId":"n","term":11}`)
	if errs := log.all(); len(errs) != 0 || s.Unverified() != 0 || s.HighestTerm() > 10 {
		t.Errorf("errors %v, Unverified %d, HighestTerm %d; want none, 0, at most 10", errs, s.Unverified(), s.HighestTerm())
	}
}
