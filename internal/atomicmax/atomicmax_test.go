package atomicmax_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/herdkit/herd/internal/atomicmax"
)

func TestRaise(t *testing.T) {
	tests := []struct {
		name       string
		from, x    int64
		want       int64
		wantRaised bool
	}{
		{name: "higher", from: 3, x: 5, want: 5, wantRaised: true},
		{name: "equal", from: 5, x: 5, want: 5},
		{name: "lower", from: 5, x: 3, want: 5},
		{name: "from zero", from: 0, x: 1, want: 1, wantRaised: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v atomic.Int64
			v.Store(tt.from)
			if got := atomicmax.Raise(&v, tt.x); got != tt.wantRaised || v.Load() != tt.want {
				t.Errorf("Raise(%d) from %d: %v, value %d; want %v, %d", tt.x, tt.from, got, v.Load(), tt.wantRaised, tt.want)
			}
		})
	}
}

// TestRaiseConcurrent: of concurrent raises the highest wins.
func TestRaiseConcurrent(t *testing.T) {
	var v atomic.Int64
	var wg sync.WaitGroup
	for i := range int64(64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			atomicmax.Raise(&v, i)
		}()
	}
	wg.Wait()
	if v.Load() != 63 {
		t.Errorf("value %d after raises up to 63", v.Load())
	}
}
