package registry

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
)

// fieldTTL is the native and the hpexpire backend: the server expires each
// hash field itself, so reads are plain HGETALL and HGET and never return an
// expired entry. The two differ only in the command registry_put.lua uses.
type fieldTTL struct {
	mode string // scripts.TTLNative or scripts.TTLHPExpire
	c    redis.UniversalClient
	k    scripts.Keys
}

func (b fieldTTL) put(ctx context.Context, p scripts.Put) (scripts.Stored, error) {
	p.Mode = b.mode
	return scripts.RegistryPut(ctx, b.c, b.k, p)
}

func (b fieldTTL) remove(ctx context.Context, id string, guard *string, reason string) (int64, error) {
	return scripts.RegistryRemove(ctx, b.c, b.k, id, guard, reason)
}

// read is a plain HGETALL or HGET unless versioned or of several ids, which
// take a transaction with the version counter.
func (b fieldTTL) read(ctx context.Context, ids []string, versioned bool) (scripts.RegistryView, error) {
	switch {
	case versioned || len(ids) > 1:
		return scripts.RegistryRead(ctx, b.c, b.k, false, ids...)
	case len(ids) == 0:
		m, err := b.c.HGetAll(ctx, b.k.Processes).Result()
		return scripts.RegistryView{Entries: m}, err
	}
	v, err := b.c.HGet(ctx, b.k.Processes, ids[0]).Result()
	if errors.Is(err, redis.Nil) {
		return scripts.RegistryView{Entries: map[string]string{}}, nil
	}
	if err != nil {
		return scripts.RegistryView{}, err
	}
	return scripts.RegistryView{Entries: map[string]string{ids[0]: v}}, nil
}
