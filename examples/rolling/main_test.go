package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"
)

// TestMain runs the test binary as a node when the demo starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(nodeEnv) != "" {
		os.Exit(node(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// TestDemo: node processes restarted one at a time under their ids, each
// down less than assign's Grace, get their items back with no move, and a
// twin of a live slave is refused, works nothing, and no item is ever live
// in two processes.
func TestDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	o := options{Redis: mr.Addr(), Items: 12, LockTTL: 4 * time.Second, Down: 500 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	s, err := run(ctx, o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if s.Restarts != 4 || s.Moved != 0 || s.Overlaps != 0 || s.TwinItems != 0 ||
		!strings.Contains(s.Twin, "another live process runs under this node id") {
		t.Errorf("summary %+v\n%s", s, out.String())
	}
	s.print(io.Discard)
}
