// Package overlap checks, in tests, that no two processes believe they are
// master at the same instant.
package overlap

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// Node is what the watch reads; *masterelection.MasterElection is one.
type Node interface {
	NodeID() string
	IsMaster() bool
}

// Watch samples IsMaster of every node as fast as it can. Node i read true
// twice in a row, with node j read true between the two reads, is an
// overlap: both believed they were master at j's read.
type Watch struct {
	nodes    []Node
	stop     chan struct{}
	done     chan struct{}
	overlaps atomic.Int64
	samples  atomic.Int64
	first    atomic.Value // string: the first overlap seen
}

// Start begins watching nodes; call Check to stop and assert.
func Start[N Node](nodes []N) *Watch {
	w := &Watch{stop: make(chan struct{}), done: make(chan struct{})}
	for _, n := range nodes {
		w.nodes = append(w.nodes, n)
	}
	go w.run()
	return w
}

func (w *Watch) run() {
	defer close(w.done)
	n := len(w.nodes)
	pass1, pass2 := make([]bool, n), make([]bool, n)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		for i, m := range w.nodes {
			pass1[i] = m.IsMaster()
		}
		for i, m := range w.nodes {
			pass2[i] = m.IsMaster()
		}
		w.samples.Add(1)
		for i := range n {
			if !pass1[i] || !pass2[i] {
				continue
			}
			for j := range n {
				// j's read lies between i's two reads: pass1 when j > i, pass2 when j < i.
				if (j > i && pass1[j]) || (j < i && pass2[j]) {
					if w.overlaps.Add(1) == 1 {
						w.first.Store(fmt.Sprintf("%s and %s", w.nodes[i].NodeID(), w.nodes[j].NodeID()))
					}
				}
			}
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// Check stops the watch and fails the test on any overlap, or when the
// watch took no sample at all.
func (w *Watch) Check(t testing.TB) {
	t.Helper()
	close(w.stop)
	<-w.done
	if n := w.overlaps.Load(); n > 0 {
		t.Fatalf("%d samples with two masters at once (first: %v) out of %d", n, w.first.Load(), w.samples.Load())
	}
	if w.samples.Load() == 0 {
		t.Fatal("overlap watch took no sample")
	}
}
