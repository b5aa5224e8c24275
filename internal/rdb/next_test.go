package rdb_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
)

// TestSuccessionIsFenced: next.lua stores a succession only while the
// writer holds the lock under the succession's term, and check.lua hands
// it back only for the current term.
func TestSuccessionIsFenced(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	res, err := rdb.Acquire(ctx, c, k, "a", 3*time.Second, nil, 0)
	if err != nil || res.Term == 0 {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	s := rdb.Succession{Term: res.Term, Order: []string{"b", "c"}}
	for _, tc := range []struct {
		name    string
		node    string
		s       rdb.Succession
		written bool
	}{
		{"another node", "b", s, false},
		{"an older term", "a", rdb.Succession{Term: res.Term - 1, Order: s.Order}, false},
		{"the master under its term", "a", s, true},
	} {
		written, err := rdb.WriteSuccession(ctx, c, k, tc.node, tc.s)
		if err != nil || written != tc.written {
			t.Errorf("%s: written %v, %v; want %v", tc.name, written, err, tc.written)
		}
	}
	var stored rdb.Succession
	if raw, _ := mr.Get(k.Next); json.Unmarshal([]byte(raw), &stored) != nil || stored.Term != s.Term || len(stored.Order) != 2 {
		t.Fatalf("stored %q", raw)
	}
	st, err := rdb.Check(ctx, c, k)
	if err != nil || st.Next.Term != s.Term || st.Next.Rank("c") != 1 {
		t.Fatalf("check: %+v, %v", st.Next, err)
	}
	// After the next acquisition the succession is of an older term: none.
	mr.Del(k.Master)
	if res, err = rdb.Acquire(ctx, c, k, "b", 3*time.Second, nil, 0); err != nil || res.Term == 0 {
		t.Fatalf("acquire by b: %+v, %v", res, err)
	}
	if st, err = rdb.Check(ctx, c, k); err != nil || st.Next.Term != 0 {
		t.Fatalf("check after a new term: %+v, %v", st.Next, err)
	}
	// Garbage in the key is no succession, and no error.
	mr.Set(k.Next, "not json")
	if st, err = rdb.Check(ctx, c, k); err != nil || st.Next.Term != 0 {
		t.Fatalf("check with garbage: %+v, %v", st.Next, err)
	}
}

// TestReleaseIsHeardByTheSuccession: release.lua announces a release to
// the first three slaves of the released term's succession, on their own
// channels in rank order, and to no one else; to a Transfer's successor
// alone; and to every process on the events channel when there is no
// succession of that term (none, an older term's, garbage).
func TestReleaseIsHeardByTheSuccession(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	ps := c.PSubscribe(ctx, k.Events+"*") // the events channel and every Turn
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	// heard releases a lock taken by "a" after prepare, and returns the
	// channels its release notice went to, in order.
	heard := func(prepare func(term int64), to string) []string {
		t.Helper()
		res, err := rdb.Acquire(ctx, c, k, "a", 3*time.Second, nil, 0)
		if err != nil || res.Term == 0 {
			t.Fatalf("acquire: %+v, %v", res, err)
		}
		if msg, err := ps.ReceiveMessage(ctx); err != nil || msg.Channel != k.Events {
			t.Fatalf("acquired notice: %v, %v", msg, err) // acquired notices go to everyone
		}
		prepare(res.Term)
		if ok, err := rdb.ReleaseTo(ctx, c, k, "a", res.Term, to, time.Second); !ok || err != nil {
			t.Fatalf("release: %v, %v", ok, err)
		}
		mr.Del(k.Successor)
		var got []string
		for {
			v, err := ps.ReceiveTimeout(ctx, 100*time.Millisecond)
			if err != nil {
				return got
			}
			got = append(got, v.(*redis.Message).Channel)
		}
	}
	write := func(s rdb.Succession) func(int64) {
		return func(term int64) {
			if s.Term == 0 {
				s.Term = term
			}
			if ok, err := rdb.WriteSuccession(ctx, c, k, "a", s); !ok || err != nil {
				t.Fatalf("write succession: %v, %v", ok, err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		prepare func(term int64)
		to      string
		want    []string
	}{
		{"the succession of the term", write(rdb.Succession{Order: []string{"b", "c", "d", "e"}}), "",
			[]string{k.Turn("b"), k.Turn("c"), k.Turn("d")}},
		{"a succession of one", write(rdb.Succession{Order: []string{"c"}}), "", []string{k.Turn("c")}},
		{"a Transfer", write(rdb.Succession{Order: []string{"b"}}), "z", []string{k.Turn("z")}},
		{"an older term's succession", func(int64) {}, "", []string{k.Events}},
		{"an empty order", write(rdb.Succession{Order: []string{}}), "", []string{k.Events}},
		{"garbage", func(int64) { mr.Set(k.Next, `{"term":"x","order":7}`) }, "", []string{k.Events}},
		{"not a string", func(int64) { mr.Del(k.Next); mr.HSet(k.Next, "f", "v") }, "", []string{k.Events}},
	} {
		if got := heard(tc.prepare, tc.to); !slices.Equal(got, tc.want) {
			t.Errorf("%s: the release went to %q, want %q", tc.name, got, tc.want)
		}
		mr.Del(k.Next)
	}
}
