package bench

import (
	"context"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// StartServer starts the redis-server executable at path for a run: on a
// free loopback port, in a temporary directory, without persistence
// (redisproc.Start), with room for the connections of the widest row (the
// registry's 10,000 processes). Close the server when the run ends.
func StartServer(ctx context.Context, path string) (*redisproc.Server, error) {
	return redisproc.Start(ctx, path, "--maxclients", "10000")
}
