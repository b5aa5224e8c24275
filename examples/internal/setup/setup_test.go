package setup

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
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
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	n.Flags(fs, "the-lock")
	if err := fs.Parse([]string{"-id", "a", "-lock-ttl", "2s"}); err != nil {
		t.Fatal(err)
	}
	if n.Redis != "127.0.0.1:7000" || n.ID != "a" || n.Lock != "the-lock" || n.LockTTL != 2*time.Second {
		t.Fatalf("flags gave %+v", n)
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
