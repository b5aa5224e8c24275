package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo: on miniredis, the killed slave's jobs are finished by the
// others and none is lost; every handling is counted.
func TestDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	newClient := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, DisableIdentity: true})
	}
	o := defaultOptions()
	o.Jobs, o.LockTTL = 120, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := run(ctx, newClient, o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sent != o.Jobs || s.Lost != 0 || s.ByVictim < o.KillAfter || s.Moved == 0 || s.ByVictim+s.Moved-s.Duplicates != o.Jobs/3 || s.Handlings != s.Sent+s.Duplicates {
		t.Errorf("summary %+v", s)
	}
	var b strings.Builder
	s.print(&b)
	if !strings.Contains(b.String(), "messages lost                        0") {
		t.Errorf("summary text:\n%s", b.String())
	}
	if n := len(mr.Keys()); n != 0 {
		t.Errorf("the demo left %d keys: %v", n, mr.Keys())
	}
}
