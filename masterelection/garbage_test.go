package masterelection

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
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

// TestStartRefusesAnInexactTerm: a term key above 2^53 - 1 (on a real
// server) is refused at Start at once with ErrGarbage and the DEL to run,
// and left as it was; nothing is written. Before, Start returned nil after
// herd itself wrote -9223372036854775808 into the term key (for
// 9223372036854775806), or after minting 9007199254740992, below the stored
// term, to every master (for 9007199254740993).
func TestStartRefusesAnInexactTerm(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.Start(t, s).Client(t)
		for _, stored := range []string{"9223372036854775806", "9007199254740993"} {
			t.Run(stored, func(t *testing.T) {
				m, err := New(c, testConfig("a"))
				if err != nil {
					t.Fatal(err)
				}
				k := m.Keys()
				if err := c.Set(t.Context(), k.Term, stored, 0).Err(); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				began := time.Now()
				err = m.Start(ctx)
				if !errors.Is(err, ErrGarbage) || !strings.Contains(err.Error(), stored) || !strings.Contains(err.Error(), "DEL "+k.Term) {
					t.Fatalf("Start over term %s = %v; want ErrGarbage naming the value and the DEL", stored, err)
				}
				if d := time.Since(began); d > 3*time.Second {
					t.Errorf("Start took %s to fail; want at once", d)
				}
				if got, _ := c.Get(t.Context(), k.Term).Result(); got != stored {
					t.Errorf("term key = %q, want %q left alone", got, stored)
				}
				if n, _ := c.Exists(t.Context(), k.Master, k.MasterProcess).Result(); n != 0 {
					t.Errorf("%d lock keys written", n)
				}
			})
		}
	})
}
