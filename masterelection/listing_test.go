package masterelection

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNewMasterStaysListedAsMaster: a handler of OnMasterAcquired that
// changes the metadata makes the membership loop write the slave role it
// still holds after the acquire registered the master: the loop then
// writes the master role again, rather than take the acquire's
// registration for the last word (the live master stayed listed as a
// slave in 10 runs of 10).
func TestNewMasterStaysListedAsMaster(t *testing.T) {
	bad := 0
	for i := 0; i < 3; i++ {
		func() {
			w := newWorld(t)
			a := w.node(testConfig("a"))
			w.start(a)
			b := w.node(testConfig("b"))
			b.OnMasterAcquired(func(ctx context.Context, term int64) {
				_ = b.SetMetadata(map[string]any{"k": "v"})
			})
			w.start(b)
			w.registered(a, "master")
			w.registered(b, "slave")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "b master", b.IsMaster)
			time.Sleep(100 * time.Millisecond)
			settle(b)
			w.advance(3*time.Second, 250*time.Millisecond, b)
			time.Sleep(50 * time.Millisecond)
			v := w.mr.HGet(b.keys.Processes, "b")
			if !strings.Contains(v, `"role":"master"`) {
				bad++
				t.Logf("iteration %d: b is master (IsMaster=%v) but its entry is %s", i, b.IsMaster(), v)
			}
		}()
	}
	if bad > 0 {
		t.Errorf("%d of 3: master listed as slave", bad)
	}
}
