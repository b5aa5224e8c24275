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

func (b fieldTTL) remove(ctx context.Context, id string, guard *string, reason string) (bool, error) {
	return scripts.RegistryRemove(ctx, b.c, b.k, id, guard, reason)
}

func (b fieldTTL) read(ctx context.Context, id string) (map[string]string, []string, error) {
	if id == "" {
		m, err := b.c.HGetAll(ctx, b.k.Processes).Result()
		return m, nil, err
	}
	v, err := b.c.HGet(ctx, b.k.Processes, id).Result()
	if errors.Is(err, redis.Nil) {
		return map[string]string{}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return map[string]string{id: v}, nil, nil
}
