package registry

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
)

// emulated is the backend for servers without hash-field expiration: the
// hash plus the sorted set Keys.ProcessesExpiry holding each entry's deadline
// (server TIME + TTL, in ms). Writes set both in one script; every read runs
// registry_expire.lua, which deletes and announces the entries whose deadline
// has passed, in one MULTI with its HGETALL or HMGET (and the version
// counter's GET), so no read returns an expired entry.
type emulated struct {
	c redis.UniversalClient
	k scripts.Keys
}

func (b emulated) put(ctx context.Context, p scripts.Put) (scripts.Stored, error) {
	p.Mode = scripts.TTLEmulated
	return scripts.RegistryPut(ctx, b.c, b.k, p)
}

func (b emulated) remove(ctx context.Context, id string, guard *string, reason string) (int64, error) {
	return scripts.RegistryRemove(ctx, b.c, b.k, id, guard, reason)
}

// read is always versioned: the expiry already makes it a transaction.
func (b emulated) read(ctx context.Context, ids []string, _ bool) (scripts.RegistryView, error) {
	return scripts.RegistryRead(ctx, b.c, b.k, true, ids...)
}
