package scripts_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/herdkit/herd/scripts"
)

// TestSuccessionIsFenced: next.lua stores a succession only while the
// writer holds the lock under the succession's term, and check.lua hands
// it back only for the current term.
func TestSuccessionIsFenced(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	res, err := scripts.Acquire(ctx, c, k, "a", 3*time.Second, nil, 0)
	if err != nil || res.Term == 0 {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	s := scripts.Succession{Term: res.Term, Order: []string{"b", "c"}}
	for _, tc := range []struct {
		name    string
		node    string
		s       scripts.Succession
		written bool
	}{
		{"another node", "b", s, false},
		{"an older term", "a", scripts.Succession{Term: res.Term - 1, Order: s.Order}, false},
		{"the master under its term", "a", s, true},
	} {
		written, err := scripts.WriteSuccession(ctx, c, k, tc.node, tc.s)
		if err != nil || written != tc.written {
			t.Errorf("%s: written %v, %v; want %v", tc.name, written, err, tc.written)
		}
	}
	var stored scripts.Succession
	if raw, _ := mr.Get(k.Next); json.Unmarshal([]byte(raw), &stored) != nil || stored.Term != s.Term || len(stored.Order) != 2 {
		t.Fatalf("stored %q", raw)
	}
	st, err := scripts.Check(ctx, c, k)
	if err != nil || st.Next.Term != s.Term || st.Next.Rank("c") != 1 {
		t.Fatalf("check: %+v, %v", st.Next, err)
	}
	// After the next acquisition the succession is of an older term: none.
	mr.Del(k.Master)
	if res, err = scripts.Acquire(ctx, c, k, "b", 3*time.Second, nil, 0); err != nil || res.Term == 0 {
		t.Fatalf("acquire by b: %+v, %v", res, err)
	}
	if st, err = scripts.Check(ctx, c, k); err != nil || st.Next.Term != 0 {
		t.Fatalf("check after a new term: %+v, %v", st.Next, err)
	}
	// Garbage in the key is no succession, and no error.
	mr.Set(k.Next, "not json")
	if st, err = scripts.Check(ctx, c, k); err != nil || st.Next.Term != 0 {
		t.Fatalf("check with garbage: %+v, %v", st.Next, err)
	}
}
