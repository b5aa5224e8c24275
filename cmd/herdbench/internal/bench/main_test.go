package bench_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdkit/herd/cmd/herdbench/internal/bench"
	"github.com/herdkit/herd/internal/testkit/redisproc"
	"github.com/herdkit/herd/internal/testkit/redistest"
)

// shared is the one redis-server the benchmarks of this binary use, started
// by the first benchmark that needs it and killed by TestMain; or the server
// at REDIS_ADDR.
var shared struct {
	once sync.Once
	srv  *redisproc.Server
	env  *bench.Env
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := shared.env.NewClient()
		if err := shared.env.Cleanup(ctx, c); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
		}
		_ = c.Close()
		cancel()
	}
	if shared.srv != nil {
		if err := shared.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// benchEnv returns the environment of the shared server. It skips (or
// fails, with HERD_REQUIRE_REDIS=1) when there is no redis-server.
func benchEnv(tb testing.TB) *bench.Env {
	tb.Helper()
	addr := os.Getenv("REDIS_ADDR")
	var path string
	if addr == "" {
		path = redistest.Default(tb).Path
	}
	shared.once.Do(func() {
		if addr != "" {
			opts, err := bench.ParseAddr(addr)
			if err != nil {
				shared.err = fmt.Errorf("REDIS_ADDR: %w", err)
				return
			}
			shared.env = bench.NewEnv(opts)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shared.srv, shared.err = bench.StartServer(ctx, path)
		if shared.err == nil {
			shared.env = bench.NewEnv(bench.ClientOptions(shared.srv.Addr))
		}
	})
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.env
}
