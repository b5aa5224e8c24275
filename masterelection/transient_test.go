package masterelection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestTransient: the errors a restart, a failover or a network blip cause
// are transient, as they come from a real client (wrapped as the loops wrap
// them); those that need a person are not, nor anything unknown.
func TestTransient(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	reply := func(prefix string) error {
		mr.SetError(prefix + " simulated")
		defer mr.SetError("")
		return c.Get(ctx, "k").Err()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := ln.Addr().String()
	_ = ln.Close()
	refused := redis.NewClient(&redis.Options{Addr: refusedAddr, MaxRetries: -1})
	t.Cleanup(func() { _ = refused.Close() })
	expired, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-expired.Done()

	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused.Ping(ctx).Err(), true},
		{"deadline", c.Get(expired, "k").Err(), true},
		{"EOF on the notice feed", fmt.Errorf("notice feed on svc:events: %w", errEOF()), true},
		{"LOADING", reply("LOADING"), true},
		{"CLUSTERDOWN", reply("CLUSTERDOWN"), true},
		{"READONLY", reply("READONLY"), true},
		{"NOPERM", reply("NOPERM"), false},
		{"OOM", reply("OOM"), false},
		{"wrong type", reply("WRONGTYPE"), false},
		{"permission", fmt.Errorf("%w: %w", ErrPermission, reply("NOPERM")), false},
		{"garbage", fmt.Errorf("check: %w", ErrGarbage), false},
		{"twin", ErrDuplicateNodeID, false},
		{"handler panic", ErrHandlerPanic, false},
		{"unknown", errors.New("something else"), false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil && tc.name != "nil" {
				t.Fatal("the client returned no error: the case shows nothing")
			}
			if got := Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// errEOF returns the error a client gets from a server that closed the
// connection mid-call.
func errEOF() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			buf := make([]byte, 64)
			_, _ = conn.Read(buf)
			_ = conn.Close()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	return c.Ping(context.Background()).Err()
}
