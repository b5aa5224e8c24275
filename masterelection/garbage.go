package masterelection

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
)

// garbageLock returns an error wrapping ErrGarbage when the lock key holds
// something other than a string: no process can take such a lock (the
// acquire script's SET NX fails on it) while the key exists, so an election
// on it cannot work. It returns nil when the lock is free or a node id.
// answered is false when Redis did not answer (the election reports that
// itself; Start asks again once Redis answers the registry). c runs the
// check script: the client, or a pipelined reply (replay).
func (m *MasterElection) garbageLock(ctx context.Context, c redis.Scripter) (garbage error, answered bool) {
	ctx, cancel := context.WithTimeout(ctx, m.opTimeout())
	defer cancel()
	st, err := scripts.Check(ctx, c, m.keys)
	if err != nil {
		return nil, false
	}
	if !st.Exists || st.NodeID != "" {
		return nil, true
	}
	return m.lockHolds(ctx), true
}

// lockHolds describes the lock key when it does not hold a node id: the
// key, what it holds (its type, read with TYPE), and how an operator clears
// it.
func (m *MasterElection) lockHolds(ctx context.Context) error {
	what := "something that is not a node id"
	if typ, err := m.client.Type(ctx, m.keys.Master).Result(); err == nil && typ != "none" && typ != "string" {
		what = fmt.Sprintf("a %s, not a node id", typ)
	}
	return fmt.Errorf("%w: key %q holds %s: no process can become master while it does; "+
		"an operator who knows it is no other program's data deletes it (DEL %s)", ErrGarbage, m.keys.Master, what, m.keys.Master)
}

// queueCheck queues the check script in pipe as EVALSHA, for Start's first
// round trip; garbageLock reads its reply through replay. (The scripts
// package has no queued form of Check, as it has of the registry probe:
// this queues what scripts.Check sends, and replay hands its reply over
// only when scripts.Check asks exactly that, so a difference costs a round
// trip, never a wrong answer.)
func (m *MasterElection) queueCheck(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return pipe.EvalSha(ctx, scripts.CheckSHA, []string{m.keys.Master, m.keys.Term})
}

// replay is a redis.Scripter through which a typed script caller of package
// scripts (which sends EVALSHA, falls back to EVAL on NOSCRIPT and checks
// the reply's shape) reads a reply that a pipeline already got: its EVALSHA
// is answered with cmd when its arguments are exactly cmd's. Everything
// else goes to the client: the EVAL after a NOSCRIPT (a server that has not
// seen the script yet), and any other call.
type replay struct {
	redis.Scripter
	cmd *redis.Cmd
}

func (r replay) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	want := make([]any, 0, 3+len(keys)+len(args))
	want = append(want, "evalsha", sha, len(keys))
	for _, k := range keys {
		want = append(want, k)
	}
	want = append(want, args...)
	if slices.EqualFunc(r.cmd.Args(), want, func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		return r.cmd
	}
	return r.Scripter.EvalSha(ctx, sha, keys, args...)
}
