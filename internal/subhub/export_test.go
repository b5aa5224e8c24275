package subhub

import (
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"
)

// HubCount returns how many hubs have a subscription.
func HubCount() int {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	return len(hubs.m)
}

// HubChannels returns the channels held on the hub of client (not a
// Cluster client), sorted; nil when it has no hub.
func HubChannels(client redis.UniversalClient) []string {
	hubs.mu.Lock()
	h := hubs.m[hubKey{client: client, slot: -1}]
	hubs.mu.Unlock()
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.chans))
}
