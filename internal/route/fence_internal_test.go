package route

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// fakeTermKey is a term key whose reads count and block until the test
// lets one answer (a send on release).
type fakeTermKey struct {
	value   atomic.Int64
	reads   atomic.Int64
	release chan struct{}
}

func (k *fakeTermKey) read(ctx context.Context) (int64, error) {
	k.reads.Add(1)
	select {
	case <-k.release:
		return k.value.Load(), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestTermReadsShared: callers that need the term key while a read is in
// flight share it when its answer confirms their term; when it does not,
// they share one more read, which began after they arrived. latest never
// takes the answer of a read that was already in flight.
func TestTermReadsShared(t *testing.T) {
	tests := []struct {
		name      string
		value     int64
		call      func(r *termReads, ctx context.Context) (int64, error)
		wantReads int64
	}{
		{"confirmed by the read in flight", 10, func(r *termReads, ctx context.Context) (int64, error) { return r.atLeast(ctx, 5) }, 1},
		{"refused: one more read for all", 3, func(r *termReads, ctx context.Context) (int64, error) { return r.atLeast(ctx, 5) }, 2},
		{"latest: one more read for all", 10, func(r *termReads, ctx context.Context) (int64, error) { return r.latest(ctx) }, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				key := &fakeTermKey{release: make(chan struct{})}
				key.value.Store(tt.value)
				r := &termReads{read: key.read}
				ctx := context.Background()
				const callers = 8
				var wg sync.WaitGroup
				results := make([]int64, callers)
				errs := make([]error, callers)
				call := func(i int) {
					defer wg.Done()
					results[i], errs[i] = tt.call(r, ctx)
				}
				wg.Add(1)
				go call(0)
				synctest.Wait() // caller 0 sends the read and waits for its answer
				for i := 1; i < callers; i++ {
					wg.Add(1)
					go call(i)
				}
				synctest.Wait() // the others wait for the same read
				if n := key.reads.Load(); n != 1 {
					t.Fatalf("%d reads in flight for %d callers, want 1", n, callers)
				}
				key.release <- struct{}{}
				if tt.wantReads == 2 {
					synctest.Wait() // the first answer did not do: all wait for a second read
					if n := key.reads.Load(); n != 2 {
						t.Fatalf("%d reads after the first answer, want 2", n)
					}
					key.release <- struct{}{}
				}
				wg.Wait()
				if n := key.reads.Load(); n != tt.wantReads {
					t.Errorf("%d reads, want %d", n, tt.wantReads)
				}
				for i := range callers {
					if errs[i] != nil || results[i] != tt.value {
						t.Errorf("caller %d: %d, %v; want %d", i, results[i], errs[i], tt.value)
					}
				}
			})
		})
	}
}

// TestTermReadsCallerCancelled: a caller whose ctx ends stops waiting; the
// read it shared goes on for the others.
func TestTermReadsCallerCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key := &fakeTermKey{release: make(chan struct{})}
		key.value.Store(10)
		r := &termReads{read: key.read}
		var owner int64
		var ownerErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			owner, ownerErr = r.atLeast(context.Background(), 5)
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		cancelled := make(chan error)
		go func() {
			_, err := r.atLeast(ctx, 5)
			cancelled <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled caller: %v", err)
		}
		key.release <- struct{}{}
		<-done
		if owner != 10 || ownerErr != nil || key.reads.Load() != 1 {
			t.Errorf("owner got %d, %v after %d reads; want 10, nil, 1", owner, ownerErr, key.reads.Load())
		}
	})
}
