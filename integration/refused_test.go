package integration

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
)

// TestStartNamesARefusedConnection: with nothing listening at the address,
// Start's error names the cause (connection refused), not only its own
// deadline.
func TestStartNamesARefusedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	m, err := masterelection.New(c, fastConfig("refused", "a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = m.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Start with nothing listening = %v, want an error naming the refused connection", err)
	}
}
