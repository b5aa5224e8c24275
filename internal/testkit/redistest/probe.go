package redistest

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// HasCommand reports whether the server behind c accepts the command args
// as given, by running it: use a scratch key, since the command takes
// effect when supported. It is false when the server replies with an error
// ("unknown command", "syntax error", ...) and also when the command could
// not be sent at all; use Supports to tell those apart. Probing by trying
// is how herd tells servers apart: versions lie (Valkey 9 reports
// redis_version 7.2.4).
//
//	native := redistest.HasCommand(ctx, c, "HSETEX", "probe:{x}", "PX", 60000, "FIELDS", 1, "f", "v")
func HasCommand(ctx context.Context, c redis.UniversalClient, args ...any) bool {
	ok, err := Supports(ctx, c, args...)
	return ok && err == nil
}

// Supports is HasCommand with the I/O error kept: it returns (true, nil)
// when the command succeeded (a nil reply counts), (false, nil) when the
// server replied with an error, and (false, err) when there was no reply.
func Supports(ctx context.Context, c redis.UniversalClient, args ...any) (bool, error) {
	if len(args) == 0 {
		return false, errors.New("redistest: probe: no command given")
	}
	err := c.Do(ctx, args...).Err()
	if err == nil || errors.Is(err, redis.Nil) {
		return true, nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false, nil
	}
	return false, err
}
