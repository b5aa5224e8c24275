package pubsub_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// batchTo returns n messages of type typ spread round-robin over slaves, each
// with its index as payload.
func batchTo(n int, typ string, slaves ...string) []pubsub.Outgoing {
	out := make([]pubsub.Outgoing, n)
	for i := range out {
		out[i] = pubsub.Outgoing{SlaveID: slaves[i%len(slaves)], Type: typ, Payload: i}
	}
	return out
}

// mustSendBatch sends msgs and fails the test unless every call was made.
func mustSendBatch(t testing.TB, r *pubsub.Router, msgs []pubsub.Outgoing) pubsub.BatchResult {
	t.Helper()
	res, err := r.SendBatch(testCtx(t), msgs)
	if err != nil {
		t.Fatalf("SendBatch of %d: %v", len(msgs), err)
	}
	if len(res.Outcomes) != len(msgs) {
		t.Fatalf("SendBatch of %d returned %d outcomes", len(msgs), len(res.Outcomes))
	}
	return res
}

// testSendBatchOrdered sends a batch longer than one call, spread over
// three slaves, and checks that each slave's Subscriber hands its messages
// over in the order of the batch, each with its own id and the one term.
func testSendBatchOrdered(t *testing.T, c redis.UniversalClient, n int) {
	mastership := newMaster(t, c, "master-1", pubsub.Config{})
	r := newRouter(t, c, mastership, nil, pubsub.Config{})
	slaves := []string{"s1", "s2", "s3"}
	got := make(map[string]chan pubsub.Message)
	logs := make(map[string]*errLog)
	for _, id := range slaves {
		_, got[id], logs[id] = startSubscriber(t, c, id, pubsub.Config{})
	}
	msgs := batchTo(n, "seq", slaves...)
	res := mustSendBatch(t, r, msgs)
	if want := (n + pubsub.MaxBatchChunk - 1) / pubsub.MaxBatchChunk; res.Calls != want {
		t.Errorf("%d messages took %d calls, want %d", n, res.Calls, want)
	}
	if res.Term != mastership.Term() || res.Delivered() != n || res.Err() != nil {
		t.Fatalf("term %d (want %d), delivered %d of %d, %v", res.Term, mastership.Term(), res.Delivered(), n, res.Err())
	}
	ids := make(map[string]bool, n)
	for i, o := range res.Outcomes {
		if uuid.Validate(o.ID) != nil || ids[o.ID] {
			t.Fatalf("message %d: id %q is not a fresh UUID", i, o.ID)
		}
		ids[o.ID] = true
	}
	for i, m := range msgs {
		rcv := receive(t, got[m.SlaveID])
		var v int
		if err := rcv.Decode(&v); err != nil || v != i {
			t.Fatalf("%s: got message %d (%v), want %d in batch order", m.SlaveID, v, err, i)
		}
		if rcv.ID != res.Outcomes[i].ID || rcv.Term != res.Term || rcv.From != "master-1" || rcv.Type != "seq" {
			t.Fatalf("message %d: received %+v, want id %s, term %d", i, rcv, res.Outcomes[i].ID, res.Term)
		}
	}
	for id, log := range logs {
		if errs := log.all(); len(errs) != 0 {
			t.Errorf("%s reported %v", id, errs)
		}
	}
}

func TestSendBatchOrdered(t *testing.T) {
	_, c := newMini(t)
	testSendBatchOrdered(t, c, 2*pubsub.MaxBatchChunk+88)
}

// TestSendBatchOutcomes: invalid messages are refused one by one and the
// others go out; a slave nobody listens for gets a *NoSubscriberError.
func TestSendBatchOutcomes(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "master-1", pubsub.Config{}), nil, pubsub.Config{})
	ps := rawSubscribe(t, c, "worker:slave:s1")
	tests := []struct {
		name   string
		msg    pubsub.Outgoing
		want   error // nil: delivered
		errHas string
	}{
		{name: "delivered", msg: pubsub.Outgoing{SlaveID: "s1", Type: "t", Payload: 0}},
		{name: "no subscriber", msg: pubsub.Outgoing{SlaveID: "gone", Type: "t"}, want: pubsub.ErrNoSubscriber, errHas: `"gone"`},
		{name: "slave id with a glob character", msg: pubsub.Outgoing{SlaveID: "s*", Type: "t"}, want: pubsub.ErrInvalidName, errHas: "glob"},
		{name: "empty slave id", msg: pubsub.Outgoing{Type: "t"}, want: pubsub.ErrInvalidName, errHas: "slave id is empty"},
		{name: "delivered between refused ones", msg: pubsub.Outgoing{SlaveID: "s1", Type: "t", Payload: 4}},
		{name: "empty type", msg: pubsub.Outgoing{SlaveID: "s1"}, want: pubsub.ErrInvalidName, errHas: "message type is empty"},
		{name: "type too long", msg: pubsub.Outgoing{SlaveID: "s1", Type: strings.Repeat("t", 300)}, want: pubsub.ErrInvalidName, errHas: "300 bytes"},
		{name: "payload too large", msg: pubsub.Outgoing{SlaveID: "s1", Type: "t", Payload: strings.Repeat("x", pubsub.MaxPayloadSize)}, want: pubsub.ErrPayloadTooLarge, errHas: "1048578 bytes"},
		{name: "raw payload not JSON", msg: pubsub.Outgoing{SlaveID: "s1", Type: "t", Payload: json.RawMessage(`{oops`)}, want: pubsub.ErrInvalidPayload, errHas: "{oops"},
		{name: "payload json cannot encode", msg: pubsub.Outgoing{SlaveID: "s1", Type: "t", Payload: math.NaN()}, want: pubsub.ErrInvalidPayload},
		{name: "second slave nobody listens for", msg: pubsub.Outgoing{SlaveID: "gone2", Type: "t"}, want: pubsub.ErrNoSubscriber},
		{name: "delivered last", msg: pubsub.Outgoing{SlaveID: "s1", Type: "t", Payload: 11}},
	}
	msgs := make([]pubsub.Outgoing, len(tests))
	for i, tt := range tests {
		msgs[i] = tt.msg
	}
	res := mustSendBatch(t, r, msgs)
	if res.Calls != 1 {
		t.Errorf("%d calls, want 1", res.Calls)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := res.Outcomes[i]
			if tt.want == nil {
				if o.Err != nil || o.ID == "" {
					t.Fatalf("outcome %+v, want delivered with an id", o)
				}
				return
			}
			if !errors.Is(o.Err, tt.want) || !strings.Contains(fmt.Sprint(o.Err), tt.errHas) {
				t.Fatalf("outcome %+v, want an error matching %v and mentioning %q", o, tt.want, tt.errHas)
			}
			published := errors.Is(tt.want, pubsub.ErrNoSubscriber)
			if (o.ID != "") != published {
				t.Errorf("id %q; want one only for a published message", o.ID)
			}
			if errors.Is(o.Err, pubsub.ErrNotSent) {
				t.Errorf("%v also claims ErrNotSent", o.Err)
			}
		})
	}
	if res.Delivered() != 3 {
		t.Errorf("Delivered() = %d, want 3", res.Delivered())
	}
	if got := pubsub.NoSubscribers(res.Err()); strings.Join(got, ",") != "gone,gone2" {
		t.Errorf("NoSubscribers(Err()) = %q", got)
	}
	if err := res.Err(); !strings.Contains(err.Error(), "message 2: ") || !errors.Is(err, pubsub.ErrInvalidPayload) {
		t.Errorf("Err() = %v; want each error prefixed by its index", err)
	}
	// s1 received the three valid messages, in order, and nothing else.
	for _, want := range []int{0, 4, 11} {
		m, err := pubsub.ParseMessage([]byte(rawReceive(t, ps).Payload))
		var v int
		if err != nil || m.Decode(&v) != nil || v != want {
			t.Fatalf("received %+v (%v), want payload %d", m, err, want)
		}
	}
	if err := c.Publish(testCtx(t), "worker:slave:s1", "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if m := rawReceive(t, ps); m.Payload != "marker" {
		t.Errorf("received %s, want the marker", m.Payload)
	}
}

// TestSendBatchNoCall: batches with nothing to publish make no call.
func TestSendBatchNoCall(t *testing.T) {
	_, c := newMini(t)
	mastership := newMaster(t, c, "master-1", pubsub.Config{})
	term := mastership.Term()
	r := newRouter(t, c, mastership, nil, pubsub.Config{})
	n := &wiretap.Tap{}
	c.AddHook(n)
	tests := []struct {
		name     string
		term     int64
		msgs     []pubsub.Outgoing
		want     error
		outcomes []error
	}{
		{name: "nil batch", term: term},
		{name: "empty batch", term: term, msgs: []pubsub.Outgoing{}},
		{name: "empty batch, not master", term: 0, msgs: []pubsub.Outgoing{}},
		{name: "all invalid", term: term, msgs: []pubsub.Outgoing{{SlaveID: "a b", Type: "t"}, {SlaveID: "s1"}},
			outcomes: []error{pubsub.ErrInvalidName, pubsub.ErrInvalidName}},
		{name: "not master", term: 0, msgs: []pubsub.Outgoing{{SlaveID: "s1", Type: "t"}, {SlaveID: "?", Type: "t"}, {SlaveID: "s2", Type: "t"}},
			want: pubsub.ErrNotMaster, outcomes: []error{pubsub.ErrNotSent, pubsub.ErrInvalidName, pubsub.ErrNotSent}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mastership.set(tt.term)
			defer mastership.set(term)
			n.Reset()
			res, err := r.SendBatch(testCtx(t), tt.msgs)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if n.Commands() != 0 || res.Calls != 0 || res.Delivered() != 0 {
				t.Errorf("%d commands, %d calls, %d delivered; want none", n.Commands(), res.Calls, res.Delivered())
			}
			if len(res.Outcomes) != len(tt.msgs) {
				t.Fatalf("%d outcomes for %d messages", len(res.Outcomes), len(tt.msgs))
			}
			for i, want := range tt.outcomes {
				if o := res.Outcomes[i]; !errors.Is(o.Err, want) || o.ID != "" {
					t.Errorf("outcome %d: %+v, want %v and no id", i, o, want)
				}
			}
			if tt.want != nil && !errors.Is(res.Outcomes[0].Err, tt.want) {
				t.Errorf("outcome 0 %v does not wrap the reason %v", res.Outcomes[0].Err, tt.want)
			}
		})
	}

	// IsMaster true but the term already 0: the election fenced itself.
	mastership.master.Store(true)
	mastership.term.Store(0)
	defer mastership.set(term)
	if _, err := r.SendBatch(testCtx(t), batchTo(3, "t", "s1")); !errors.Is(err, pubsub.ErrNotMaster) || n.Commands() != 0 {
		t.Errorf("term 0: %v after %d commands", err, n.Commands())
	}
}

// TestSendBatchSplit: a batch is split into calls by message count and by
// bytes, each call one command, and the messages stay in order. Each batch
// ends with one more message, to another slave.
func TestSendBatchSplit(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "master-1", pubsub.Config{}), nil, pubsub.Config{})
	_, got, _ := startSubscriber(t, c, "s1", pubsub.Config{})
	rawSubscribe(t, c, "worker:slave:s2")
	n := &wiretap.Tap{}
	c.AddHook(n)
	if err := rdb.Load(testCtx(t), c); err != nil {
		t.Fatal(err)
	}
	big := func(kb int) any { return strings.Repeat("x", kb<<10) }
	tests := []struct {
		name     string
		payloads []any
		calls    int
	}{
		{name: "one message", payloads: make([]any, 1), calls: 1},
		{name: "one call full", payloads: make([]any, pubsub.MaxBatchChunk-1), calls: 1},
		{name: "one more than a call", payloads: make([]any, pubsub.MaxBatchChunk), calls: 2},
		{name: "three calls", payloads: make([]any, 2*pubsub.MaxBatchChunk+5), calls: 3},
		{name: "bytes: two of 600 KiB do not share a call", payloads: []any{big(600), big(600)}, calls: 2},
		{name: "bytes: 300 KiB three to a call", payloads: []any{big(300), big(300), big(300), big(300), 1}, calls: 2},
		{name: "bytes: the largest payload goes alone", payloads: []any{1, strings.Repeat("x", pubsub.MaxPayloadSize-2), 2}, calls: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := make([]pubsub.Outgoing, len(tt.payloads))
			for i, p := range tt.payloads {
				msgs[i] = pubsub.Outgoing{SlaveID: "s1", Type: "t", Payload: p}
			}
			msgs = append(msgs, pubsub.Outgoing{SlaveID: "s2", Type: "t", Payload: "last"})
			n.Reset()
			res := mustSendBatch(t, r, msgs)
			if res.Calls != tt.calls || n.Commands() != tt.calls {
				t.Errorf("%d calls, %d commands; want %d", res.Calls, n.Commands(), tt.calls)
			}
			if res.Err() != nil {
				t.Fatal(res.Err())
			}
			for i := range tt.payloads {
				if m := receive(t, got); m.ID != res.Outcomes[i].ID {
					t.Fatalf("message %d: received %s, want %s", i, m.ID, res.Outcomes[i].ID)
				}
			}
		})
	}
}

// routeBatchHook is a go-redis hook on the Router's client that runs
// before (and may fail instead of) each call of the route_batch script,
// and after each answered one. Calls are numbered from 1.
type routeBatchHook struct {
	calls  atomic.Int64
	before func(call int64) error
	after  func(call int64)
}

var routeBatchSHA = rdb.RouteBatchSHA

func isRouteBatch(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == routeBatchSHA
	case "eval":
		src, _ := args[1].(string)
		sum := sha1.Sum([]byte(src))
		return hex.EncodeToString(sum[:]) == routeBatchSHA
	}
	return false
}

func (h *routeBatchHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *routeBatchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isRouteBatch(cmd) {
			return next(ctx, cmd)
		}
		call := h.calls.Add(1)
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

func (h *routeBatchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSendBatchStopsPartWay: a batch of three calls stops at its second
// for each reason it can; the first call's messages are out, the rest's
// outcomes say whether they may be.
func TestSendBatchStopsPartWay(t *testing.T) {
	injected := errors.New("connection reset by the test")
	tests := []struct {
		name string
		// hook arranges for the second call to fail; admin is a client of
		// the same server without hooks.
		hook func(admin redis.UniversalClient, mastership *fakeMastership, cfg pubsub.Config, cancel context.CancelFunc) *routeBatchHook
		want error
		// second is what the second call's messages get; the third's
		// always match ErrNotSent.
		second []error
		calls  int
	}{
		{
			name: "lock taken over after the first call",
			hook: func(admin redis.UniversalClient, _ *fakeMastership, cfg pubsub.Config, _ context.CancelFunc) *routeBatchHook {
				return &routeBatchHook{after: func(call int64) {
					if call == 1 {
						takeOver(t, admin, cfg, "node-b")
					}
				}}
			},
			want: keyspace.ErrFenced, second: []error{pubsub.ErrNotSent, pubsub.ErrNotMaster, keyspace.ErrFenced}, calls: 2,
		},
		{
			name: "election reports the loss after the first call",
			hook: func(_ redis.UniversalClient, mastership *fakeMastership, _ pubsub.Config, _ context.CancelFunc) *routeBatchHook {
				return &routeBatchHook{after: func(call int64) {
					if call == 1 {
						mastership.set(0)
					}
				}}
			},
			want: pubsub.ErrNotMaster, second: []error{pubsub.ErrNotSent, pubsub.ErrNotMaster}, calls: 1,
		},
		{
			name: "context cancelled after the first call",
			hook: func(_ redis.UniversalClient, _ *fakeMastership, _ pubsub.Config, cancel context.CancelFunc) *routeBatchHook {
				return &routeBatchHook{after: func(call int64) {
					if call == 1 {
						cancel()
					}
				}}
			},
			want: context.Canceled, second: []error{pubsub.ErrNotSent, context.Canceled}, calls: 1,
		},
		{
			name: "second call fails in flight",
			hook: func(redis.UniversalClient, *fakeMastership, pubsub.Config, context.CancelFunc) *routeBatchHook {
				return &routeBatchHook{before: func(call int64) error {
					if call == 2 {
						return injected
					}
					return nil
				}}
			},
			want: injected, second: []error{injected}, calls: 2,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mr, admin := newMini(t)
			c := redis.NewClient(clientOptions(mr.Addr()))
			t.Cleanup(func() { _ = c.Close() })
			cfg := pubsub.Config{LockName: fmt.Sprintf("part-%d", i)}
			mastership := newMaster(t, admin, "node-a", cfg)
			r := newRouter(t, c, mastership, nil, cfg)
			ps := rawSubscribe(t, admin, cfg.SlaveChannel("s1"))
			if err := rdb.Load(testCtx(t), c); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			c.AddHook(tt.hook(admin, mastership, cfg, cancel))

			chunk := pubsub.MaxBatchChunk
			msgs := batchTo(3*chunk, "t", "s1")
			res, err := r.SendBatch(ctx, msgs)
			if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), "of 3") {
				t.Fatalf("error %v, want %v naming the call it stopped at", err, tt.want)
			}
			if res.Calls != tt.calls {
				t.Errorf("%d calls, want %d", res.Calls, tt.calls)
			}
			for j, o := range res.Outcomes {
				switch {
				case j < chunk:
					if o.Err != nil {
						t.Fatalf("message %d of the first call: %v", j, o.Err)
					}
				case j < 2*chunk:
					for _, want := range tt.second {
						if !errors.Is(o.Err, want) {
							t.Fatalf("message %d of the second call: %v, want %v", j, o.Err, want)
						}
					}
					if notSent := errors.Is(o.Err, pubsub.ErrNotSent); notSent != errors.Is(tt.second[0], pubsub.ErrNotSent) {
						t.Fatalf("message %d of the second call: %v; ErrNotSent only when certainly not sent", j, o.Err)
					}
				default:
					if !errors.Is(o.Err, pubsub.ErrNotSent) || !errors.Is(o.Err, tt.want) {
						t.Fatalf("message %d of the third call: %v, want ErrNotSent and %v", j, o.Err, tt.want)
					}
				}
			}
			if res.Delivered() != chunk {
				t.Errorf("Delivered() = %d, want %d", res.Delivered(), chunk)
			}
			// The first call's messages arrived, then nothing but the marker.
			for j := range chunk {
				if m, err := pubsub.ParseMessage([]byte(rawReceive(t, ps).Payload)); err != nil || m.ID != res.Outcomes[j].ID {
					t.Fatalf("message %d: received %+v, %v", j, m, err)
				}
			}
			if err := admin.Publish(testCtx(t), cfg.SlaveChannel("s1"), "marker").Err(); err != nil {
				t.Fatal(err)
			}
			if m := rawReceive(t, ps); m.Payload != "marker" {
				t.Errorf("received %.80s after the first call, want the marker", m.Payload)
			}
		})
	}

	t.Run("context cancelled before", func(t *testing.T) {
		_, c := newMini(t)
		r := newRouter(t, c, newMaster(t, c, "node-a", pubsub.Config{}), nil, pubsub.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := r.SendBatch(ctx, batchTo(3, "t", "s1"))
		if !errors.Is(err, context.Canceled) || res.Calls != 0 {
			t.Fatalf("%v after %d calls", err, res.Calls)
		}
		for j, o := range res.Outcomes {
			if !errors.Is(o.Err, pubsub.ErrNotSent) || !errors.Is(o.Err, context.Canceled) {
				t.Errorf("message %d: %v", j, o.Err)
			}
		}
	})
}

// FuzzSendBatch: whatever the batch holds, SendBatch neither panics nor
// misreports: one outcome per message, an id exactly for those published,
// each refusal an input error, nothing unsent while the lock is held.
func FuzzSendBatch(f *testing.F) {
	f.Add("a|t|1\nb|t|\"x\"\ngone|t|null")
	f.Add("a|t|{oops\n|t|1\na b|t|2\na|*|3")
	f.Add("a||\n\n|||\na|t|[1,2]")
	f.Add(strings.Repeat("a|t|1\n", 300))
	_, c := newMini(f)
	r := newRouter(f, c, newMaster(f, c, "master-1", pubsub.Config{}), nil, pubsub.Config{})
	for _, id := range []string{"a", "b"} {
		// Subscribers that read and drop everything, so that nothing piles up.
		s, err := pubsub.NewSubscriber(c, id, pubsub.Config{})
		if err != nil {
			f.Fatal(err)
		}
		s.HandleDefault(func(context.Context, pubsub.Message) error { return nil })
		if err := s.Start(testCtx(f)); err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { _ = s.Close() })
	}
	f.Fuzz(func(t *testing.T, spec string) {
		var msgs []pubsub.Outgoing
		for line := range strings.SplitSeq(spec, "\n") {
			parts := strings.SplitN(line, "|", 3)
			for len(parts) < 3 {
				parts = append(parts, "")
			}
			msgs = append(msgs, pubsub.Outgoing{SlaveID: parts[0], Type: parts[1], Payload: json.RawMessage(parts[2])})
		}
		res, err := r.SendBatch(testCtx(t), msgs)
		if err != nil {
			t.Fatalf("batch %q: %v", spec, err)
		}
		if len(res.Outcomes) != len(msgs) {
			t.Fatalf("%d outcomes for %d messages", len(res.Outcomes), len(msgs))
		}
		for i, o := range res.Outcomes {
			invalid := errors.Is(o.Err, pubsub.ErrInvalidName) || errors.Is(o.Err, pubsub.ErrInvalidPayload) || errors.Is(o.Err, pubsub.ErrPayloadTooLarge)
			switch {
			case o.ID == "" && !invalid:
				t.Errorf("message %d %+v: no id but %v", i, msgs[i], o.Err)
			case o.ID != "" && o.Err != nil && !errors.Is(o.Err, pubsub.ErrNoSubscriber):
				t.Errorf("message %d %+v: published with %v", i, msgs[i], o.Err)
			case o.Err == nil && msgs[i].SlaveID != "a" && msgs[i].SlaveID != "b":
				t.Errorf("message %d to %q delivered, but nobody listens there", i, msgs[i].SlaveID)
			}
		}
	})
}
