package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// run is the one place that calls a script: EVALSHA with EVAL fallback, and
// errors wrapped with the script's name. redis.Nil never leaves it.
func run(ctx context.Context, c redis.Scripter, s *redis.Script, name string, keys []string, args ...any) (any, error) {
	reply, err := s.Run(ctx, c, keys, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, unexpected(name, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%s script: %w%s", name, err, aclHint(name, err))
	}
	return reply, nil
}

// scriptCommands are the commands each script runs, for ACL errors: Redis
// 7.0 does not name the command a script was refused.
var scriptCommands = map[string]string{
	"acquire":         "GET, SET, PTTL, TIME, PUBLISH",
	"renew":           "GET, TIME, PEXPIRE, SET",
	"release":         "GET, DEL, SET, PUBLISH",
	"check":           "GET, PTTL",
	"check beat":      "GET, PTTL, and those of registry put",
	"route":           "GET, PUBLISH",
	"next":            "GET, SET",
	"hand back":       "GET, SET, PTTL",
	"route batch":     "GET, PUBLISH",
	"inbox send":      "GET, HEXISTS, ZSCORE, TIME, SADD, XLEN, XADD",
	"assign plan":     "GET, HGET, HSET, HDEL, SADD, SREM",
	"assign sync":     "TIME, HGET, HSET, HDEL, SMEMBERS, SADD, SREM",
	"inbox move":      "GET, XRANGE, XPENDING, XADD, SADD, XACK, XDEL, XLEN, DEL, SREM",
	"inbox adopt":     "GET, TIME, HEXISTS, ZSCORE, EXISTS, XRANGE, XPENDING, XADD, XACK, XDEL, XLEN, DEL, SREM",
	"inbox dead":      "XRANGE, XADD, XACK, XDEL",
	"dead retry":      "XRANGE, HEXISTS, ZSCORE, TIME, GET, XADD, SADD, XDEL",
	"registry probe":  "TYPE, HSETEX, HPEXPIRE, HSET, HDEL",
	"registry put":    "GET, HEXISTS, TIME, SET, HSETEX or HSET + HPEXPIRE or ZSCORE + ZADD, PUBLISH",
	"registry remove": "HGET, ZSCORE, TIME, GET, HDEL, ZREM, SET, PUBLISH",
	"registry read":   "TIME, ZRANGEBYSCORE, GET, ZREM, HDEL, SET, PUBLISH, and around it MULTI, EXEC, HGETALL or HMGET, GET",
}

// aclHint adds, to an error that is a refusal by Redis's ACL, the commands
// the script needs, so the message names what to grant.
func aclHint(name string, err error) string {
	msg := err.Error()
	// NOPERM outside scripts; inside, Redis 7.0 says "can't run this
	// command" and Redis 8 / Valkey 9 "ACL failure in script".
	if !strings.Contains(msg, "NOPERM") && !strings.Contains(msg, "can't run this command") &&
		!strings.Contains(msg, "ACL failure in script") {
		return ""
	}
	return fmt.Sprintf(" (permission denied by the ACL: the Redis user needs EVALSHA, EVAL and the commands the %s script runs: %s; see docs/topologies.md)", name, scriptCommands[name])
}

func oneOrZero(name string, reply any) (bool, error) {
	n, ok := reply.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, unexpected(name, reply)
	}
	return n == 1, nil
}

func unexpected(name string, reply any) error {
	return fmt.Errorf("%s script: %w %#v", name, ErrUnexpectedReply, reply)
}

func termArg(term int64) string {
	if term <= 0 {
		return ""
	}
	return strconv.FormatInt(term, 10)
}

func pttlDuration(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}
