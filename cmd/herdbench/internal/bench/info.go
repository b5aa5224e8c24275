package bench

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// ServerCPU returns the CPU time the server has used, in seconds: the sum
// of used_cpu_sys and used_cpu_user from an INFO cpu reply.
func ServerCPU(info string) (float64, error) {
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, ok := redisproc.InfoField(info, f)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s=%q: %w", f, v, err)
		}
		total += x
	}
	return total, nil
}

// ServerVersion names the server behind c from INFO server: "valkey-9.1.2"
// for Valkey (which also reports a redis_version for compatibility),
// "redis-7.0.15" for Redis.
func ServerVersion(ctx context.Context, c redis.UniversalClient) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("INFO server: %w", err)
	}
	return serverVersion(info), nil
}

func serverVersion(info string) string {
	if v, ok := redisproc.InfoField(info, "valkey_version"); ok {
		return "valkey-" + v
	}
	name, ok := redisproc.InfoField(info, "server_name")
	if !ok || name == "" {
		name = "redis"
	}
	if v, ok := redisproc.InfoField(info, "redis_version"); ok {
		return name + "-" + v
	}
	return name + "-unknown"
}

// commandStats reads INFO commandstats from c.
func commandStats(ctx context.Context, c redis.UniversalClient) (benchkit.CommandStats, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return benchkit.ParseCommandStats(info), nil
}

// serverCPU reads the server's CPU time (seconds) from c.
func serverCPU(ctx context.Context, c redis.UniversalClient) (float64, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	return ServerCPU(info)
}

// ServerMicros calls op.Do n times (with op.Reset after each, untimed) and
// returns the mean time Redis spent executing command per call, in
// microseconds, from INFO commandstats before and after: what one call
// costs inside the server, without the network, the client or the
// scheduler. command is named as commandstats names it ("evalsha",
// "ping"); a script's own commands are inside its time. The calls of
// op.Reset, and of anyone else on the server, count too when they are of
// the same command: use it for operations without a Reset, on a server
// nobody else uses.
func ServerMicros(ctx context.Context, c redis.UniversalClient, op Op, command string, n int) (float64, error) {
	read := func() (int64, int64, error) {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, 0, err
		}
		calls, usec, _ := benchkit.CommandUsec(info, command) // absent: no call yet
		return calls, usec, nil
	}
	calls0, usec0, err := read()
	if err != nil {
		return 0, err
	}
	for range n {
		if err := once(ctx, op); err != nil {
			return 0, err
		}
	}
	calls1, usec1, err := read()
	if err != nil {
		return 0, err
	}
	if calls1-calls0 < int64(n) {
		return 0, fmt.Errorf("bench: INFO commandstats counted %d %s calls for %d operations", calls1-calls0, command, n)
	}
	return float64(usec1-usec0) / float64(calls1-calls0), nil
}
