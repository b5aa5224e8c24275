//go:build topologies

package topologies

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redistest"
)

// TestTLS runs herd's election, registry and routing over TLS, set up
// through go-redis's TLSConfig option alone, on every server of the matrix
// that was built with TLS.
func TestTLS(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.StartTLS(t, s) // skips a server built without TLS
		tlsConfig := inst.ClientTLS(t)
		dep := deployment{name: "tls", dataNodes: []*redistest.Instance{inst.Instance},
			newClient: func(t *testing.T, co clientOpts) redis.UniversalClient {
				o := inst.Options()
				o.Addr, o.TLSConfig = inst.TLSAddr, tlsConfig.Clone()
				o.Username, o.Password = co.user, co.password
				if co.dial != nil {
					// A custom Dialer replaces go-redis's TLS dial: wrap it.
					o.Dialer = tlsDial(co.dial, o.TLSConfig)
				}
				c := redis.NewClient(o)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}}
		t.Run("election", func(t *testing.T) { testElection(t, dep) })
		t.Run("registry-routing", func(t *testing.T) { testRegistryRouting(t, dep) })
	})
}

// tlsDial wraps a plain dialer with a TLS handshake, as go-redis's own
// dialer does when no Dialer is given.
func tlsDial(dial dialFunc, cfg *tls.Config) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			c.ServerName = host
		}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
}
