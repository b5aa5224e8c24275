package rdb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

// TestNoticesOfTheScriptsParse: what acquire.lua and release.lua publish
// reads back through ParseNotice; malformed notices are refused.
func TestNoticesOfTheScriptsParse(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	ps := c.Subscribe(ctx, k.Events, k.Turn("n2")) // a Transfer's release goes to its successor's channel
	defer ps.Close()
	for range 2 {
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a, err := rdb.Acquire(ctx, c, k, "n1", time.Second, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.ReleaseTo(ctx, c, k, "n1", a.Term, "n2", time.Second); err != nil {
		t.Fatal(err)
	}
	_ = mr
	want := []keyspace.Notice{
		{Event: keyspace.NoticeAcquired, NodeID: "n1", Term: a.Term},
		{Event: keyspace.NoticeReleased, NodeID: "n1", Term: a.Term, To: "n2"},
	}
	for _, w := range want {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := keyspace.ParseNotice([]byte(msg.Payload))
		if err != nil || got.Event != w.Event || got.NodeID != w.NodeID || got.Term != w.Term || got.To != w.To {
			t.Fatalf("notice %s = %+v, %v; want %+v", msg.Payload, got, err, w)
		}
	}
	for _, bad := range []string{``, `[]`, `{}`, `{"event":"acquired","nodeId":"x"}`, `{"event":"released","term":"5"}`, `{"event":"acquired","term":-1}`} {
		if _, err := keyspace.ParseNotice([]byte(bad)); !errors.Is(err, keyspace.ErrMalformedNotice) {
			t.Errorf("ParseNotice(%q) = %v, want ErrMalformedNotice", bad, err)
		}
	}
	if n, err := keyspace.ParseNotice([]byte(`{"event":"something-else","x":1}`)); err != nil || n.Lock() {
		t.Errorf("an unknown event: %+v, %v; want it read and left to the reader", n, err)
	}
}
