package testsync

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 400 {
		t.Fatalf("%d bytes written, want 400", n)
	}
}

func TestWaitFor(t *testing.T) {
	var calls atomic.Int32
	WaitWithin(t, time.Minute, "the third call", func() bool { return calls.Add(1) == 3 })
	if calls.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", calls.Load())
	}
}

// fatalRecorder records Fatalf instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Helper()               {}
func (f *fatalRecorder) Fatalf(string, ...any) { f.failed = true }

func TestWaitWithinGivesUp(t *testing.T) {
	f := &fatalRecorder{TB: t}
	WaitWithin(f, time.Millisecond, "never", func() bool { return false })
	if !f.failed {
		t.Fatal("WaitWithin returned without failing for a condition that never holds")
	}
}
