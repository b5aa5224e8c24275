package setup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdkit/herd/masterelection"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOptions(t *testing.T) {
	tests := []struct {
		name, addr, wantAddr string
		wantDB               int
		wantErr              bool
	}{
		{name: "host:port", addr: "127.0.0.1:6390", wantAddr: "127.0.0.1:6390"},
		{name: "url", addr: "redis://127.0.0.1:6391/2", wantAddr: "127.0.0.1:6391", wantDB: 2},
		{name: "bad url", addr: "redis://[::1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Options(tt.addr)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "-redis") {
					t.Fatalf("Options(%q) = %v, want an error naming -redis", tt.addr, err)
				}
				return
			}
			if err != nil || o.Addr != tt.wantAddr || o.DB != tt.wantDB || !o.ContextTimeoutEnabled || !o.DisableIdentity || o.MaintNotificationsConfig == nil {
				t.Fatalf("Options(%q) = %+v, %v", tt.addr, o, err)
			}
		})
	}
}

func TestNodeFlags(t *testing.T) {
	t.Setenv("REDIS_ADDR", "127.0.0.1:7000")
	var n Node
	fs := n.Flags("x", "the-lock")
	if err := fs.Parse([]string{"-id", "a", "-lock-ttl", "2s"}); err != nil {
		t.Fatal(err)
	}
	if n.Redis != "127.0.0.1:7000" || n.ID != "a" || n.Lock != "the-lock" || n.LockTTL != 2*time.Second || fs.Name() != "x" {
		t.Fatalf("flags gave %+v (flag set %q)", n, fs.Name())
	}
}

func TestConnectEmbedded(t *testing.T) {
	newClient, where, cleanup, err := Connect("")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if !strings.Contains(where, "miniredis") {
		t.Errorf("where = %q, want the embedded miniredis", where)
	}
	c := newClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestConnectUnreachable(t *testing.T) {
	if _, _, _, err := Connect("127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "cannot reach Redis") {
		t.Fatalf("Connect to a closed port: %v", err)
	}
}

func TestLogRoles(t *testing.T) {
	var b strings.Builder
	l := NewLog(&b, "n1")
	for _, e := range []masterelection.Event{
		{Kind: masterelection.EventMasterAcquired, Term: 7},
		{Kind: masterelection.EventElectionCompleted, IsMaster: true},
		{Kind: masterelection.EventMasterLost, Term: 7},
		{Kind: masterelection.EventElectionCompleted},
		{Kind: masterelection.EventSlaveRegistered},
		{Kind: masterelection.EventError, Err: errors.New("boom")},
	} {
		l.Roles(e)
	}
	l.Printf("done %d", 1)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{"MASTER with term 7", "no longer master (term 7)", "slave", "error: boom", "done 1"}
	if len(lines) != len(want) {
		t.Fatalf("printed:\n%s\nwant %d lines", b.String(), len(want))
	}
	for i, line := range lines {
		// "15:04:05.000 n1         text": the time, the id padded to 10.
		if _, err := time.Parse("15:04:05.000", line[:12]); err != nil || line[12:24] != " n1         " || line[24:] != want[i] {
			t.Errorf("line %d = %q, want the time, n1, then %q", i, line, want[i])
		}
	}
}

func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			if n++; n == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Every did not return when its ctx ended")
	}
	if n < 3 {
		t.Errorf("f ran %d times before the ctx ended, want 3", n)
	}
}
