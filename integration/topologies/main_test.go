//go:build topologies

package topologies

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's own log lines: failovers make it log every failed
// dial and sentinel query, which buries the tests' output.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// go-redis probes a server it failed to dial from a goroutine that checks
// once a second whether its pool was closed: after a node was killed it
// outlives Close by up to a second. It is go-redis's, and it ends.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
