package route_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/route"
)

type termSource struct{ term int64 }

func (s *termSource) ObservedTerm() int64 { return s.term }

func newFence(t *testing.T, terms route.TermSource) (*route.Fence, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	if terms == nil {
		return route.NewFence(c, "lock:term", nil, time.Second), m
	}
	return route.NewFence(c, "lock:term", terms, time.Second), m
}

// TestFenceAdmit: the fence admits terms at or above the highest seen,
// raising it, and rejects lower ones.
func TestFenceAdmit(t *testing.T) {
	f, _ := newFence(t, nil)
	steps := []struct {
		term    int64
		wantOK  bool
		wantCmp int64 // the fence compared with
	}{{5, true, 0}, {5, true, 5}, {4, false, 5}, {9, true, 5}, {6, false, 9}}
	for _, s := range steps {
		if h, ok := f.Admit(s.term); ok != s.wantOK || h != s.wantCmp {
			t.Fatalf("Admit(%d) = %d, %v; want %d, %v", s.term, h, ok, s.wantCmp, s.wantOK)
		}
	}
	if f.Highest() != 9 {
		t.Errorf("Highest %d, want 9", f.Highest())
	}
}

// TestFenceVerify: a term is verified by the known terms, the TermSource or
// one read of the term key; a term above the key, or a missing key, is not.
func TestFenceVerify(t *testing.T) {
	tests := []struct {
		name       string
		key        string // "" for no key
		observed   int64
		source     int64
		term       int64
		wantOK     bool
		wantStored int64
		wantErr    error
	}{
		{name: "at the key", key: "10", term: 10, wantOK: true, wantStored: 10},
		{name: "below the key", key: "10", term: 3, wantOK: true, wantStored: 10},
		{name: "above the key", key: "10", term: 11, wantStored: 10},
		{name: "key missing", term: 1, wantErr: route.ErrTermMissing},
		{name: "key garbage", key: "x", term: 1, wantErr: route.ErrNotATerm},
		{name: "key above the largest term", key: "9007199254740992", term: 9007199254740992, wantErr: route.ErrNotATerm},
		{name: "known", observed: 20, term: 20, wantOK: true},
		{name: "from the source", source: 30, term: 25, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, m := newFence(t, &termSource{term: tt.source})
			if tt.key != "" {
				m.Set("lock:term", tt.key)
			}
			f.Observe(tt.observed)
			ok, stored, err := f.Verify(context.Background(), tt.term)
			if ok != tt.wantOK || (!ok && stored != tt.wantStored) || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Verify(%d) = %v, %d, %v; want %v, %d, %v", tt.term, ok, stored, err, tt.wantOK, tt.wantStored, tt.wantErr)
			}
			if f.Highest() != tt.observed {
				t.Errorf("Verify moved the fence to %d", f.Highest())
			}
		})
	}
}

// TestFenceLatest: Latest reads the term key and raises the fence to it;
// the error of a missing key or an unreachable Redis says which.
func TestFenceLatest(t *testing.T) {
	f, m := newFence(t, nil)
	if _, err := f.Latest(context.Background()); !errors.Is(err, route.ErrTermMissing) {
		t.Fatalf("no key: %v", err)
	}
	m.Set("lock:term", "12")
	if term, err := f.Latest(context.Background()); err != nil || term != 12 || f.Highest() != 12 {
		t.Fatalf("Latest = %d, %v; fence %d", term, err, f.Highest())
	}
	m.Close()
	if _, err := f.Latest(context.Background()); !errors.Is(err, route.ErrConnection) {
		t.Fatalf("Redis gone: %v", err)
	}
}
