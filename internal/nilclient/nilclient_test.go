package nilclient

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestIs(t *testing.T) {
	var typed *redis.Client
	var cluster *redis.ClusterClient
	var ring *redis.Ring
	real := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer real.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{name: "nil", client: nil, want: true},
		{name: "typed nil *redis.Client", client: typed, want: true},
		{name: "typed nil *redis.ClusterClient", client: cluster, want: true},
		{name: "typed nil *redis.Ring", client: ring, want: true},
		{name: "a client", client: real, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Is(tc.client); got != tc.want {
				t.Fatalf("Is(%T) = %v, want %v", tc.client, got, tc.want)
			}
		})
	}
}
