package redistest

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Miniredis starts an in-process miniredis and returns it with a client of
// it, made with the same options as Instance.Options. A
// t.Cleanup closes the client, then the server. miniredis TTLs move only on
// FastForward, or with SetTime after ClockTTL(true).
func Miniredis(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatalf("redistest: start miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	c := redis.NewClient(clientOptions(m.Addr()))
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}
