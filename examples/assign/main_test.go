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

// TestDemo: on miniredis, a killed slave and a master restarted mid-move
// leave every item with one owner at a time, and items did move.
func TestDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	newClient := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, DisableIdentity: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	s, err := run(ctx, newClient, defaultOptions(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if s.Overlaps != 0 || s.Moved == 0 || s.LongestGap <= 0 {
		t.Errorf("summary %+v\n%s", s, out.String())
	}
	if !strings.Contains(out.String(), "restarted mid-move") {
		t.Errorf("output:\n%s", out.String())
	}
	s.print(io.Discard)
}
