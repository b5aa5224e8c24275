package rdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// TestHandBackOncePerWindow: handback.lua gives one hand-back per window,
// only to the master under its term, and tells the others how long the
// window lasts.
func TestHandBackOncePerWindow(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	res, err := rdb.Acquire(ctx, c, k, "a", 3*time.Second, nil, 0)
	if err != nil || res.Term == 0 {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	window := 2 * time.Second
	for _, tc := range []struct {
		name string
		node string
		term int64
		want rdb.HandBack
	}{
		{"another node", "b", res.Term, rdb.HandBack{NotMaster: true}},
		{"an older term", "a", res.Term - 1, rdb.HandBack{NotMaster: true}},
		{"the master", "a", res.Term, rdb.HandBack{Taken: true}},
		{"the master again", "a", res.Term, rdb.HandBack{Wait: window}},
	} {
		got, err := rdb.TakeHandBack(ctx, c, k, tc.node, tc.term, window)
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	mr.FastForward(window)
	if got, err := rdb.TakeHandBack(ctx, c, k, "a", res.Term, window); err != nil || !got.Taken {
		t.Fatalf("after the window: %+v, %v; want taken", got, err)
	}
	mr.Set(k.HandBack, "no ttl")
	if got, err := rdb.TakeHandBack(ctx, c, k, "a", res.Term, window); err != nil || got.Wait != -1 {
		t.Fatalf("a key without TTL: %+v, %v; want Wait -1", got, err)
	}
}
