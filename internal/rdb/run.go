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
	if err := scriptError(name, err); err != nil {
		return nil, err
	}
	return reply, nil
}

// queuedResult is run's reading of a reply for a script queued in a
// pipeline (QueueCheck, QueueRegistryProbe, Ask): the reply of cmd, or its
// error as run would return it.
func queuedResult(cmd *redis.Cmd, name string) (any, error) {
	reply, err := cmd.Result()
	if err := scriptError(name, err); err != nil {
		return nil, err
	}
	return reply, nil
}

// scriptError is the error of the script name's call that failed with
// err, or nil: redis.Nil becomes ErrUnexpectedReply (no script of herd
// answers nil), anything else is wrapped with the script's name and, for a
// refusal by the ACL, the commands to grant.
func scriptError(name string, err error) error {
	switch {
	case errors.Is(err, redis.Nil):
		return unexpected(name, nil)
	case err != nil:
		return fmt.Errorf("%s script: %w%s", name, err, aclHint(name, err))
	}
	return nil
}

// noScript reports whether err is the server's answer to an EVALSHA of a
// script it has not cached.
func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// scriptCommands are the commands each script runs, for ACL errors: Redis
// 7.0 does not name the command a script was refused.
var scriptCommands = map[string]string{
	"acquire":          "GET, SET, PTTL, TIME, PUBLISH",
	"acquire register": "GET, SET, PTTL, TIME, PUBLISH, DEL, and those of registry put",
	"renew":            "GET, TIME, PEXPIRE, SET",
	"release":          "GET, DEL, SET, PUBLISH",
	"check":            "GET, PTTL",
	"check beat":       "GET, PTTL, and those of registry put",
	"route":            "GET, PUBLISH",
	"next":             "GET, SET",
	"hand back":        "GET, SET, PTTL",
	"route batch":      "GET, PUBLISH",
	"inbox send":       "GET, HEXISTS, ZSCORE, TIME, SADD, XLEN, XADD",
	"assign plan":      "GET, HGET, HSET, HDEL, SADD, SREM",
	"assign sync":      "TIME, HGET, HSET, HDEL, SMEMBERS, SADD, SREM",
	"inbox move":       "GET, XRANGE, XPENDING, XADD, SADD, XACK, XDEL, XLEN, DEL, SREM",
	"inbox adopt":      "GET, TIME, HEXISTS, ZSCORE, EXISTS, XRANGE, XPENDING, XADD, XACK, XDEL, XLEN, DEL, SREM",
	"inbox dead":       "XRANGE, XADD, XACK, XDEL",
	"dead retry":       "XRANGE, HEXISTS, ZSCORE, TIME, GET, XADD, SADD, XDEL",
	"registry probe":   "TYPE, HSETEX, HPEXPIRE, HSET, HDEL",
	"registry put":     "GET, HEXISTS, TIME, SET, HSETEX or HSET + HPEXPIRE or ZSCORE + ZADD, PUBLISH",
	"registry remove":  "HGET, ZSCORE, TIME, GET, HDEL, ZREM, SET, PUBLISH",
	"registry read":    "TIME, ZRANGEBYSCORE, GET, ZREM, HDEL, SET, PUBLISH, and around it MULTI, EXEC, HGETALL or HMGET, GET",
}

// aclRefusals are the texts of a refusal by Redis's ACL: NOPERM outside
// scripts; inside, Redis 7.0 says "can't run this command" and Redis 8 /
// Valkey 9 "ACL failure in script".
var aclRefusals = []string{"NOPERM", "can't run this command", "ACL failure in script"}

// containsAny reports whether s contains any of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// aclHint adds, to an error that is a refusal by Redis's ACL, the commands
// the script needs, so the message names what to grant.
func aclHint(name string, err error) string {
	if !containsAny(err.Error(), aclRefusals) {
		return ""
	}
	return fmt.Sprintf(" (permission denied by the ACL: the Redis user needs EVALSHA, EVAL and the commands the %s script runs: %s; see docs/topologies.md)", name, scriptCommands[name])
}

// oneOrZero reads the reply of a script that answers 1 (done) or 0 (not
// done, the lock not being the caller's) as a bool.
func oneOrZero(name string, reply any) (bool, error) {
	done, ok := flag(reply)
	if !ok {
		return false, unexpected(name, reply)
	}
	return done, nil
}

// unexpected is the error of a reply whose shape the script name's header
// does not document.
func unexpected(name string, reply any) error {
	return fmt.Errorf("%s script: %w %#v", name, ErrUnexpectedReply, reply)
}

// argv returns fixed followed by each of strs: a script's ARGV whose tail
// is a list (items, channels), built in one place.
func argv(strs []string, fixed ...any) []any {
	args := make([]any, 0, len(fixed)+len(strs))
	args = append(args, fixed...)
	for _, s := range strs {
		args = append(args, s)
	}
	return args
}

// termArg is a term as the scripts take it: its decimal digits, or "" (no
// term to check) for 0.
func termArg(term int64) string {
	if term <= 0 {
		return ""
	}
	return strconv.FormatInt(term, 10)
}

// pttlDuration is a PTTL reply in milliseconds as a duration: -1 when the
// key has no expiry (or none).
func pttlDuration(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}
