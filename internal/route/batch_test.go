package route_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// fakeMastership is a route.Mastership whose answers the test sets; terms, when set,
// gives Term's answer at each call in turn (the last one repeats).
type fakeMastership struct {
	master bool
	term   int64
	terms  []int64
}

func (l *fakeMastership) NodeID() string { return "master-1" }
func (l *fakeMastership) IsMaster() bool { return l.master }
func (l *fakeMastership) Term() int64 {
	if len(l.terms) == 0 {
		return l.term
	}
	t := l.terms[0]
	if len(l.terms) > 1 {
		l.terms = l.terms[1:]
	}
	return t
}

// calls records what a route.Call carried and answers as told.
type calls struct {
	carried [][]route.Item
	fail    map[int]error // by call number, from 0
}

func (c *calls) call(_ context.Context, term int64, items []route.Item) ([]error, error) {
	n := len(c.carried)
	c.carried = append(c.carried, items)
	if err := c.fail[n]; err != nil {
		return nil, err
	}
	errs := make([]error, len(items))
	for j, it := range items {
		if it.SlaveID == "gone" {
			errs[j] = fmt.Errorf("no one for %q", it.SlaveID)
		}
		var m pubsub.Message
		if err := json.Unmarshal(it.Data, &m); err != nil || m.Term != term {
			errs[j] = fmt.Errorf("envelope %s: %v", it.Data, err)
		}
	}
	return errs, nil
}

func batchOf(n int, slave string, payload any) *route.Batch {
	b := route.NewBatch(n)
	for range n {
		b.Add(slave, "work", payload)
	}
	return b
}

// TestBatchChunks: a batch is split into calls of at most MaxChunk
// messages and MaxChunkBytes bytes, in order, skipping invalid messages; a
// message larger than MaxChunkBytes goes alone.
func TestBatchChunks(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("x", route.MaxChunkBytes/2) + `"`)
	tests := []struct {
		name      string
		batch     func() *route.Batch
		wantCalls []int // messages per call
	}{
		{name: "one call", batch: func() *route.Batch { return batchOf(3, "s1", 1) }, wantCalls: []int{3}},
		{name: "by count", batch: func() *route.Batch { return batchOf(2*route.MaxChunk+1, "s1", 1) }, wantCalls: []int{route.MaxChunk, route.MaxChunk, 1}},
		{name: "by bytes", batch: func() *route.Batch { return batchOf(3, "s1", big) }, wantCalls: []int{1, 1, 1}},
		{name: "invalid skipped", batch: func() *route.Batch {
			b := batchOf(2, "s1", 1)
			b.Add("bad name", "work", 1)
			b.Add("s1", "work", func() {})
			b.Add("s2", "work", 2)
			return b
		}, wantCalls: []int{3}},
		{name: "nothing valid", batch: func() *route.Batch { return batchOf(2, "", 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := tt.batch(), &calls{}
			if err := b.Send(context.Background(), &fakeMastership{master: true, term: 7}, time.Now(), c.call); err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, items := range c.carried {
				got = append(got, len(items))
			}
			if !slices.Equal(got, tt.wantCalls) || b.Calls != len(tt.wantCalls) {
				t.Fatalf("calls carried %v (Calls %d), want %v", got, b.Calls, tt.wantCalls)
			}
			for i, err := range b.Errs {
				if (err == nil) != (b.IDs[i] != "") {
					t.Errorf("message %d: id %q with error %v", i, b.IDs[i], err)
				}
			}
		})
	}
}

// TestBatchStops: where a batch stops, which messages are certainly not
// sent (ErrNotSent) and which have the failed call's error.
func TestBatchStops(t *testing.T) {
	inFlight := errors.New("i/o timeout")
	fenced := fmt.Errorf("route batch: %w", keyspace.ErrFenced)
	n := 2*route.MaxChunk + 1
	tests := []struct {
		name       string
		mastership *fakeMastership
		fail       map[int]error
		wantErr    error
		calls      int
		// want is the error each message matches, by range of messages.
		want func(i int) error
	}{
		{name: "not master", mastership: &fakeMastership{}, wantErr: route.ErrNotMaster, calls: 0,
			want: func(int) error { return route.ErrNotSent }},
		{name: "fenced second call", mastership: &fakeMastership{master: true, term: 7}, fail: map[int]error{1: fenced}, wantErr: keyspace.ErrFenced, calls: 2,
			want: func(i int) error {
				if i < route.MaxChunk {
					return nil
				}
				return route.ErrNotSent
			}},
		{name: "second call lost in flight", mastership: &fakeMastership{master: true, term: 7}, fail: map[int]error{1: inFlight}, wantErr: inFlight, calls: 2,
			want: func(i int) error {
				switch {
				case i < route.MaxChunk:
					return nil
				case i < 2*route.MaxChunk:
					return inFlight
				}
				return route.ErrNotSent
			}},
		{name: "new term between calls", mastership: &fakeMastership{master: true, terms: []int64{7, 8}}, wantErr: route.ErrNotMaster, calls: 1,
			want: func(i int) error {
				if i < route.MaxChunk {
					return nil
				}
				return route.ErrNotSent
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := batchOf(n, "s1", 1), &calls{fail: tt.fail}
			err := b.Send(context.Background(), tt.mastership, time.Now(), c.call)
			if !errors.Is(err, tt.wantErr) || b.Calls != tt.calls {
				t.Fatalf("Send: %v after %d calls; want %v after %d", err, b.Calls, tt.wantErr, tt.calls)
			}
			for i, got := range b.Errs {
				want := tt.want(i)
				if (want == nil) != (got == nil) || !errors.Is(got, want) {
					t.Fatalf("message %d: %v, want %v", i, got, want)
				}
				if errors.Is(got, route.ErrNotSent) && !errors.Is(got, tt.wantErr) {
					t.Fatalf("message %d: %v does not say why (%v)", i, got, tt.wantErr)
				}
			}
		})
	}
}

// TestBatchCancelled: a cancelled ctx stops the batch before its next call.
func TestBatchCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b, c := batchOf(2, "s1", 1), &calls{}
	if err := b.Send(ctx, &fakeMastership{master: true, term: 7}, time.Now(), c.call); !errors.Is(err, context.Canceled) || len(c.carried) != 0 {
		t.Fatalf("Send: %v after %d calls", err, len(c.carried))
	}
	for i, err := range b.Errs {
		if !errors.Is(err, route.ErrNotSent) || !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: %v", i, err)
		}
	}
}

// TestBatchRefused: invalid messages keep their own error whatever happens
// to the others, and a message the call refused keeps the call's answer.
func TestBatchRefused(t *testing.T) {
	b := route.NewBatch(4)
	b.Add("s1", "work", 1)
	b.Add("s1", "", 1)
	b.Add("s1", "work", json.RawMessage(`{`))
	b.Add("gone", "work", 1)
	c := &calls{}
	if err := b.Send(context.Background(), &fakeMastership{}, time.Now(), c.call); !errors.Is(err, route.ErrNotMaster) {
		t.Fatalf("not master: %v", err)
	}
	if !errors.Is(b.Errs[1], route.ErrInvalidName) || !errors.Is(b.Errs[2], route.ErrInvalidPayload) || !errors.Is(b.Errs[0], route.ErrNotSent) {
		t.Fatalf("not master: %v", b.Errs)
	}
	b = route.NewBatch(2)
	b.Add("s1", "work", 1)
	b.Add("gone", "work", 1)
	if err := b.Send(context.Background(), &fakeMastership{master: true, term: 3}, time.Now(), c.call); err != nil || b.Errs[0] != nil || b.Errs[1] == nil || b.Term != 3 {
		t.Fatalf("Send: %v, %v, term %d", err, b.Errs, b.Term)
	}
}
