package pubsub_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// routeHook is a go-redis hook on a Router's client: it counts round trips
// (a pipeline is one; new connections' handshakes left out, see wiretap) and pipelines, records what each call of the route
// script carried, runs before (which may fail instead of) each such call
// and after each answered one. Calls are numbered from 1.
type routeHook struct {
	trips, pipelines atomic.Int64
	before           func(call int) error
	after            func(call int)

	mu       sync.Mutex
	channels []int // channels per call, in order
	bytes    []int // envelope bytes per call, counted once per channel
}

// routeCall returns the channels and envelope bytes of cmd when it is a
// call of the route script (EVALSHA or EVAL: numkeys, 2 keys, node id,
// term, envelope, channels), and ok false otherwise.
func routeCall(cmd redis.Cmder) (channels, envelope int, ok bool) {
	args := cmd.Args()
	if len(args) < 8 {
		return 0, 0, false
	}
	switch cmd.Name() {
	case "evalsha":
		ok = args[1] == rdb.RouteSHA
	case "eval":
		src, _ := args[1].(string)
		sum := sha1.Sum([]byte(src))
		ok = hex.EncodeToString(sum[:]) == rdb.RouteSHA
	}
	switch m := args[7].(type) {
	case []byte:
		envelope = len(m)
	case string:
		envelope = len(m)
	}
	return len(args) - 8, envelope, ok
}

func (h *routeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *routeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !wiretap.Handshake(cmd) {
			h.trips.Add(1)
		}
		channels, envelope, ok := routeCall(cmd)
		if !ok {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.channels = append(h.channels, channels)
		h.bytes = append(h.bytes, channels*envelope)
		call := len(h.channels)
		h.mu.Unlock()
		if h.before != nil {
			if err := h.before(call); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		if err == nil && h.after != nil {
			h.after(call)
		}
		return err
	}
}

func (h *routeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && wiretap.Handshake(cmds[0]) {
			return next(ctx, cmds)
		}
		h.trips.Add(1)
		h.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// calls returns the channels and bytes each route call carried.
func (h *routeHook) calls() (channels, bytes []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.channels), slices.Clone(h.bytes)
}

// broadcastSetup is a Router of master "node-a" on its own lock name and
// slave prefix, whose client carries a routeHook, with n slaves that are
// all subscribed on one connection of admin, a client of the same server
// without hooks.
type broadcastSetup struct {
	cfg        pubsub.Config
	mastership *fakeMastership
	router     *pubsub.Router
	hook       *routeHook
	admin      redis.UniversalClient
	ids        []string
	ps         *redis.PubSub
}

func newBroadcastSetup(t *testing.T, admin redis.UniversalClient, opts *redis.Options, name string, n int) *broadcastSetup {
	t.Helper()
	cfg := pubsub.Config{LockName: name, SlavePrefix: name + ":slave:"}
	s := &broadcastSetup{cfg: cfg, admin: admin, hook: &routeHook{}}
	s.mastership = newMaster(t, admin, "node-a", cfg)
	channels := make([]string, n)
	for i := range n {
		s.ids = append(s.ids, fmt.Sprintf("s%03d", i))
		channels[i] = cfg.SlaveChannel(s.ids[i])
	}
	// The master is listed too, and skipped.
	lister := slaveList{ids: append([]string{"node-a"}, s.ids...)}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	if err := rdb.Load(testCtx(t), c); err != nil { // no NOSCRIPT fallback in the counts
		t.Fatal(err)
	}
	c.AddHook(s.hook)
	s.router = newRouter(t, c, s.mastership, lister, cfg)
	s.ps = admin.Subscribe(testCtx(t), channels...)
	t.Cleanup(func() { _ = s.ps.Close() })
	for range n {
		m, err := s.ps.ReceiveTimeout(testCtx(t), waitLimit)
		if _, ok := m.(*redis.Subscription); err != nil || !ok {
			t.Fatalf("subscribe: %v, %v", m, err)
		}
	}
	return s
}

// receiveAll receives want messages on s.ps and returns them by slave id;
// it fails the test on a second message to one slave.
func (s *broadcastSetup) receiveAll(t *testing.T, want int) map[string]pubsub.Message {
	t.Helper()
	got := make(map[string]pubsub.Message, want)
	for range want {
		raw := rawReceive(t, s.ps)
		id := strings.TrimPrefix(raw.Channel, s.cfg.SlavePrefix)
		m, err := pubsub.ParseMessage([]byte(raw.Payload))
		if err != nil {
			t.Fatalf("on %s: %v", raw.Channel, err)
		}
		if _, dup := got[id]; dup {
			t.Fatalf("%s received the broadcast twice", id)
		}
		got[id] = m
	}
	return got
}

// nothingMore checks that nothing else reached the slaves: the next message
// on their connection is a marker published now.
func (s *broadcastSetup) nothingMore(t *testing.T) {
	t.Helper()
	if err := s.admin.Publish(testCtx(t), s.cfg.SlaveChannel(s.ids[len(s.ids)-1]), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if m := rawReceive(t, s.ps); m.Payload != "marker" {
		t.Fatalf("received %.80s on %s, want the marker", m.Payload, m.Channel)
	}
}

// TestBroadcastChunks: a Broadcast to more slaves than one call carries
// reaches every slave once, with one id and one term, in calls made one
// after another of at most MaxBatchChunk channels each: one route script
// call and one round trip per chunk, no pipeline. On miniredis and on each
// real server.
func TestBroadcastChunks(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		mr, admin := newMini(t)
		testBroadcastChunks(t, admin, clientOptions(mr.Addr()))
	})
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		testBroadcastChunks(t, inst.Client(t), inst.Options())
	})
}

func testBroadcastChunks(t *testing.T, admin redis.UniversalClient, opts *redis.Options) {
	chunk := pubsub.MaxBatchChunk
	for _, n := range []int{chunk, chunk + 1, 2*chunk + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := newBroadcastSetup(t, admin, opts, fmt.Sprintf("chunks-%d", n), n)
			delivered, err := s.router.Broadcast(testCtx(t), "reload", map[string]int{"v": 2})
			if delivered != n || err != nil {
				t.Fatalf("Broadcast: delivered %d, %v; want %d, nil", delivered, err, n)
			}
			chunks := (n + chunk - 1) / chunk
			channels, _ := s.hook.calls()
			if len(channels) != chunks {
				t.Errorf("%d route calls (%v channels), want %d", len(channels), channels, chunks)
			}
			sum := 0
			for i, k := range channels {
				sum += k
				if k > chunk {
					t.Errorf("call %d carried %d channels, more than %d", i+1, k, chunk)
				}
			}
			if sum != n {
				t.Errorf("the calls carried %d channels, want %d", sum, n)
			}
			if trips, pipes := s.hook.trips.Load(), s.hook.pipelines.Load(); trips != int64(chunks) || pipes != 0 {
				t.Errorf("%d round trips, %d pipelines; want %d and 0", trips, pipes, chunks)
			}
			got := s.receiveAll(t, n)
			first := got[s.ids[0]]
			for _, id := range s.ids {
				m, ok := got[id]
				switch {
				case !ok:
					t.Fatalf("%s received nothing", id)
				case m.ID == "" || m.ID != first.ID || m.Term != s.mastership.Term() || m.From != "node-a" || m.Type != "reload":
					t.Fatalf("%s received %+v; want id %s, term %d, from node-a", id, m, first.ID, s.mastership.Term())
				}
			}
			s.nothingMore(t)
		})
	}
}

// TestBroadcastChunkBytes: a call also carries at most MaxBatchChunkBytes
// of envelopes counted once per channel, and an envelope larger than that
// goes to one slave per call.
func TestBroadcastChunkBytes(t *testing.T) {
	mr, admin := newMini(t)
	for _, tt := range []struct {
		kib   int
		calls []int
	}{
		{kib: 300, calls: []int{3, 3, 1}},
		{kib: pubsub.MaxPayloadSize>>10 - 1, calls: []int{1, 1}},
	} {
		t.Run(fmt.Sprint(tt.kib, "KiB"), func(t *testing.T) {
			n := 0
			for _, k := range tt.calls {
				n += k
			}
			s := newBroadcastSetup(t, admin, clientOptions(mr.Addr()), fmt.Sprintf("bytes-%d", tt.kib), n)
			if d, err := s.router.Broadcast(testCtx(t), "big", strings.Repeat("x", tt.kib<<10)); d != n || err != nil {
				t.Fatalf("Broadcast: delivered %d, %v", d, err)
			}
			channels, bytes := s.hook.calls()
			if !slices.Equal(channels, tt.calls) {
				t.Errorf("calls carried %v channels, want %v", channels, tt.calls)
			}
			for i, b := range bytes {
				if b > pubsub.MaxBatchChunkBytes && channels[i] > 1 {
					t.Errorf("call %d published %d envelope bytes to %d channels", i+1, b, channels[i])
				}
			}
			if len(s.receiveAll(t, n)) != n {
				t.Fatal("not every slave received the broadcast")
			}
		})
	}
}

// slaveOf returns the slave id a joined error of Broadcast names with
// "broadcast to slave <quoted id>:", or "".
func slaveOf(err error) string {
	_, rest, ok := strings.Cut(err.Error(), "broadcast to slave ")
	if !ok {
		return ""
	}
	q, err2 := strconv.QuotedPrefix(rest)
	if err2 != nil {
		return ""
	}
	id, _ := strconv.Unquote(q)
	return id
}

// TestBroadcastStopsPartWay: a Broadcast of three calls stops at its second
// for each reason it can. The first call's slaves received it, and only
// they; delivered counts them; err names every other slave once, with an
// error saying whether it was certainly not sent (ErrNotSent and why) or
// may have been (the failed call's error); an Observer counts each slave.
// On miniredis and on the default real server.
func TestBroadcastStopsPartWay(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		mr, admin := newMini(t)
		testBroadcastStopsPartWay(t, admin, clientOptions(mr.Addr()))
	})
	t.Run("redis-server", func(t *testing.T) {
		inst := redistest.Start(t, redistest.Default(t))
		testBroadcastStopsPartWay(t, inst.Client(t), inst.Options())
	})
}

func testBroadcastStopsPartWay(t *testing.T, admin redis.UniversalClient, opts *redis.Options) {
	injected := errors.New("connection reset by the test")
	chunk := pubsub.MaxBatchChunk
	n := 2*chunk + 5
	tests := []struct {
		name string
		// arrange sets the hook up to stop the broadcast at its second call.
		arrange func(t *testing.T, s *broadcastSetup, cancel context.CancelFunc)
		calls   int
		// second and third are what the slaves of the second and the
		// third call match; notSent, whether the second's certainly were
		// not sent.
		second, third []error
		notSent       bool
		outcome       pubsub.RouteOutcome // of the second call's slaves
	}{
		{
			name: "lock taken over before the second call",
			arrange: func(t *testing.T, s *broadcastSetup, _ context.CancelFunc) {
				s.hook.before = func(call int) error {
					if call == 2 {
						takeOver(t, s.admin, s.cfg, "node-b")
					}
					return nil
				}
			},
			calls:   2,
			second:  []error{pubsub.ErrNotSent, pubsub.ErrNotMaster, keyspace.ErrFenced},
			third:   []error{pubsub.ErrNotSent, pubsub.ErrNotMaster, keyspace.ErrFenced},
			notSent: true, outcome: pubsub.RouteFenced,
		},
		{
			name: "election reports the loss after the first call",
			arrange: func(_ *testing.T, s *broadcastSetup, _ context.CancelFunc) {
				s.hook.after = func(call int) {
					if call == 1 {
						s.mastership.set(0)
					}
				}
			},
			calls:   1,
			second:  []error{pubsub.ErrNotSent, pubsub.ErrNotMaster},
			third:   []error{pubsub.ErrNotSent, pubsub.ErrNotMaster},
			notSent: true, outcome: pubsub.RouteNotMaster,
		},
		{
			name: "context cancelled after the first call",
			arrange: func(_ *testing.T, s *broadcastSetup, cancel context.CancelFunc) {
				s.hook.after = func(call int) {
					if call == 1 {
						cancel()
					}
				}
			},
			calls:   1,
			second:  []error{pubsub.ErrNotSent, context.Canceled},
			third:   []error{pubsub.ErrNotSent, context.Canceled},
			notSent: true, outcome: pubsub.RouteFailed,
		},
		{
			name: "second call fails in flight",
			arrange: func(_ *testing.T, s *broadcastSetup, _ context.CancelFunc) {
				s.hook.before = func(call int) error {
					if call == 2 {
						return injected
					}
					return nil
				}
			},
			calls:   2,
			second:  []error{injected},
			third:   []error{pubsub.ErrNotSent, injected},
			notSent: false, outcome: pubsub.RouteFailed,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newBroadcastSetup(t, admin, opts, fmt.Sprintf("stops-%d", i), n)
			term := s.mastership.Term()
			var mu sync.Mutex
			observed := map[pubsub.RouteOutcome]int{}
			s.router.Observe(pubsub.Observer{Routed: func(o pubsub.RouteOutcome, k int) {
				mu.Lock()
				observed[o] += k
				mu.Unlock()
			}})
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			tt.arrange(t, s, cancel)

			delivered, err := s.router.Broadcast(ctx, "t", "payload")
			if delivered != chunk {
				t.Errorf("delivered %d, want the first call's %d", delivered, chunk)
			}
			for _, want := range tt.second {
				if !errors.Is(err, want) {
					t.Errorf("error does not match %v: %.300v", want, err)
				}
			}
			if errors.Is(err, pubsub.ErrNoSubscriber) || len(pubsub.NoSubscribers(err)) != 0 {
				t.Errorf("error claims a slave had no subscriber: %.300v", err)
			}
			if channels, _ := s.hook.calls(); len(channels) != tt.calls {
				t.Errorf("%d route calls, want %d", len(channels), tt.calls)
			}

			// err names every slave but the first call's, once each.
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("error %T is not a join of one error per slave", err)
			}
			named := map[string]error{}
			for _, e := range joined.Unwrap() {
				id := slaveOf(e)
				if id == "" || named[id] != nil {
					t.Fatalf("joined error %v names no slave, or one named before", e)
				}
				named[id] = e
			}
			if len(named) != n-chunk {
				t.Errorf("err names %d slaves, want %d", len(named), n-chunk)
			}
			for j, id := range s.ids {
				e := named[id]
				var want []error
				switch {
				case j < chunk:
					if e != nil {
						t.Fatalf("%s of the first call: %v", id, e)
					}
					continue
				case j < 2*chunk:
					want = tt.second
					if errors.Is(e, pubsub.ErrNotSent) != tt.notSent {
						t.Fatalf("%s of the second call: %v; ErrNotSent only when certainly not sent", id, e)
					}
				default:
					want = tt.third
				}
				for _, w := range want {
					if !errors.Is(e, w) {
						t.Fatalf("%s: %v, want %v", id, e, w)
					}
				}
			}

			// The first call's slaves received it, then nothing but the marker.
			got := s.receiveAll(t, chunk)
			for _, id := range s.ids[:chunk] {
				if m, ok := got[id]; !ok || m.Term != term {
					t.Fatalf("%s of the first call received %+v (%v)", id, m, ok)
				}
			}
			s.nothingMore(t)

			mu.Lock()
			defer mu.Unlock()
			want := map[pubsub.RouteOutcome]int{pubsub.RouteDelivered: chunk, tt.outcome: n - chunk}
			if !maps.Equal(observed, want) {
				t.Errorf("observed %v, want %v (one per slave)", observed, want)
			}
		})
	}
}
