//go:build topologies

package topologies

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
)

// TestClusterCoverageWarning: on a Cluster with cluster-require-full-coverage
// yes (Redis's default) and cluster-node-timeout 2 s, a failover of any
// master makes the lock's slot answer CLUSTERDOWN for longer than a master
// with LockTTL 1 s can go without renewing: Start warns with an error event
// wrapping ErrClusterCoverage that names the setting. With
// cluster-require-full-coverage no it does not. Before, nothing warned.
func TestClusterCoverageWarning(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.StartCluster(t, s, 3)
		dep := onCluster(c)
		start := func(id string) []error {
			t.Helper()
			el, err := masterelection.New(dep.newClient(t, clientOpts{}), fastConfig("coverage", id))
			if err != nil {
				t.Fatal(err)
			}
			errs := &errLog{}
			el.OnError(errs.add)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := el.Start(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // the error handler runs on its own goroutine
			if err := el.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			var out []error
			for _, err := range errs.all() {
				if errors.Is(err, masterelection.ErrClusterCoverage) {
					out = append(out, err)
				}
			}
			return out
		}
		got := start("a")
		if len(got) != 1 || !strings.Contains(got[0].Error(), "cluster-require-full-coverage yes") ||
			!strings.Contains(got[0].Error(), "cluster-node-timeout 2s") {
			t.Fatalf("full coverage required: coverage warnings %v, want one naming the setting and the node timeout", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, m := range c.Masters {
			if err := m.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
				t.Fatal(err)
			}
		}
		if got := start("b"); len(got) != 0 {
			t.Fatalf("full coverage not required: coverage warnings %v, want none", got)
		}
	})
}
