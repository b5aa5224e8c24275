package overlap

import (
	"sync/atomic"
	"testing"
	"time"
)

type fake struct {
	id     string
	master atomic.Bool
}

func (f *fake) NodeID() string { return f.id }
func (f *fake) IsMaster() bool { return f.master.Load() }

type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true }
func (r *recorder) Helper()               {}

func TestWatch(t *testing.T) {
	a, b := &fake{id: "a"}, &fake{id: "b"}
	nodes := []*fake{a, b}

	a.master.Store(true)
	w := Start(nodes)
	time.Sleep(5 * time.Millisecond)
	a.master.Store(false)
	b.master.Store(true)
	time.Sleep(5 * time.Millisecond)
	r := &recorder{TB: t}
	w.Check(r)
	if r.failed {
		t.Fatal("a clean hand-over reported as an overlap")
	}

	a.master.Store(true) // both now
	w = Start(nodes)
	time.Sleep(5 * time.Millisecond)
	r = &recorder{TB: t}
	w.Check(r)
	if !r.failed {
		t.Fatal("two masters at once not reported")
	}
}
