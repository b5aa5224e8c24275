package rdb

import (
	"context"
	_ "embed" // access.lua
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

//go:embed access.lua
var accessSrc string

// AccessCall is access.lua queued in a pipeline by QueueAccess; read its
// answer with Result once the pipeline has run.
type AccessCall struct {
	cmd *redis.Cmd
}

// QueueAccess queues access.lua in pipe: which of the commands the election
// runs on the keys k and their channels the current user's ACL refuses. It
// writes nothing. Like QueueCheck it queues EVAL with the script's source.
func QueueAccess(ctx context.Context, pipe redis.Pipeliner, k keyspace.Keys) *AccessCall {
	keys := []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Successor, k.Processes, k.ProcessesExpiry, k.ProcessesVersion, k.Next}
	return &AccessCall{cmd: pipe.Eval(ctx, accessSrc, keys, k.Events, k.RegistryEvents)}
}

// Result returns the refused commands, each as "COMMAND key-or-channel"
// (none on a server older than Redis 7.0, which cannot tell), or the error
// that kept the script from running: when the user may not run EVAL, or
// the connection was refused (WRONGPASS), the error is Redis's own.
func (c *AccessCall) Result() ([]string, error) {
	reply, err := c.cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, unexpected("access", nil)
	case err != nil:
		return nil, fmt.Errorf("access script: %w", err)
	}
	refused, ok := appendStrings([]string{}, reply)
	if !ok {
		return nil, unexpected("access", reply)
	}
	return refused, nil
}

// IsRefusal reports whether err is Redis refusing the user rather than the
// command: a wrong password or user (WRONGPASS), no authentication
// (NOAUTH), or a command, key or channel the user's ACL does not allow
// (NOPERM; inside a script Redis 7.0 says "can't run this command" and
// Redis 8 / Valkey 9 "ACL failure in script"). Retrying does not help.
func IsRefusal(err error) bool {
	return err != nil && containsAny(err.Error(), refusals)
}

// refusals are the texts of Redis refusing the user (IsRefusal): those of
// authentication, then those of the ACL.
var refusals = append([]string{"WRONGPASS", "NOAUTH"}, aclRefusals...)
