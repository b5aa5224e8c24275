package masterelection

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/redistest"
)

// TestStartRefusesAGarbageLock: with the lock key holding a hash (another
// program's data, on a real server), no process can ever become master.
// Start fails at once with an error naming the key and what it holds, and
// so does Master; once an operator deleted the key, the election works.
func TestStartRefusesAGarbageLock(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		c := inst.Client(t)
		cfg := testConfig("a")
		m, err := New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		key := m.Keys().Master
		if err := c.HSet(t.Context(), key, "owner", "someone else").Err(); err != nil {
			t.Fatal(err)
		}
		wantErr := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrGarbage) || !strings.Contains(err.Error(), `"`+key+`"`) || !strings.Contains(err.Error(), "holds a hash") {
				t.Errorf("%s = %v; want ErrGarbage naming %q and saying it holds a hash", what, err, key)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		began := time.Now()
		wantErr("Start", m.Start(ctx))
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("Start took %s to fail; want at once", d)
		}
		_, _, err = m.Master(ctx)
		wantErr("Master", err)

		// Cleared by an operator: a new election becomes master.
		if err := c.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		m2, err := New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = m2.Stop(context.Background()) }()
		if err := m2.Start(ctx); err != nil || !m2.IsMaster() {
			t.Fatalf("Start after the key was deleted = %v, IsMaster %v", err, m2.IsMaster())
		}
	})
}
