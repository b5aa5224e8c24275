package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

// Replication asks that a lock write be acknowledged by replicas before it
// counts: the write script is followed by WAIT Replicas Timeout on the same
// connection. The zero value waits for nothing.
type Replication struct {
	// Replicas is how many replicas must acknowledge the write.
	Replicas int
	// Timeout bounds the WAIT (milliseconds resolution; at least 1ms).
	Timeout time.Duration
}

// AcquireReplicated is Acquire followed by WAIT: acked is the number of
// replicas that acknowledged the write (meaningful when a term was minted).
// The caller decides what too few acknowledgements mean.
func AcquireReplicated(ctx context.Context, c redis.UniversalClient, k keyspace.Keys, nodeID string, ttl time.Duration, info []byte, seen int64, r Replication) (Acquired, int64, error) {
	reply, acked, err := runWaited(ctx, c, acquireScript, withWrites(acquireSrc), "acquire", acquireKeys(k), r, acquireArgs(k, nodeID, ttl, info, seen)...)
	if err != nil {
		return Acquired{}, 0, err
	}
	a, err := parseAcquired(k, reply)
	return a, acked, err
}

// RenewReplicated is Renew followed by WAIT; acked is as for AcquireReplicated.
func RenewReplicated(ctx context.Context, c redis.UniversalClient, k keyspace.Keys, nodeID string, term int64, ttl time.Duration, r Replication) (ok bool, acked int64, err error) {
	reply, acked, err := runWaited(ctx, c, renewScript, renewSrc, "renew", acquireKeys(k), r, nodeID, ttl.Milliseconds(), termArg(term))
	if err != nil {
		return false, 0, err
	}
	ok, err = oneOrZero("renew", reply)
	return ok, acked, err
}

// runWaited runs a script and WAIT in one pipeline, so both go over one
// connection: WAIT counts the replicas that have every write of its own
// connection. Under Redis Cluster the pipeline goes to the master of the
// keys' slot (a cluster pipeline could send WAIT to another node). A server
// without the script cached gets it by EVAL, in a second pipeline.
func runWaited(ctx context.Context, c redis.UniversalClient, s *redis.Script, src, name string, keys []string, r Replication, args ...any) (any, int64, error) {
	pipe, err := pipelineFor(ctx, c, name, keys[0])
	if err != nil {
		return nil, 0, err
	}
	eval, wait := r.send(ctx, pipe, pipe.EvalSha(ctx, s.Hash(), keys, args...))
	if noScript(eval.Err()) {
		eval, wait = r.send(ctx, pipe, pipe.Eval(ctx, src, keys, args...))
	}
	if err := eval.Err(); err != nil {
		return nil, 0, fmt.Errorf("%s script: %w", name, err)
	}
	acked, err := wait.Int64()
	if err != nil {
		return nil, 0, fmt.Errorf("%s script: wait for %d replicas: %w", name, r.Replicas, err)
	}
	return eval.Val(), acked, nil
}

// pipelineFor returns a pipeline to the server that holds key: the master
// of its slot under Redis Cluster, c's server otherwise. name is the
// script's, for the error.
func pipelineFor(ctx context.Context, c redis.UniversalClient, name, key string) (redis.Pipeliner, error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return c.Pipeline(), nil
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%s script: find the node of %q: %w", name, key, err)
	}
	return node.Pipeline(), nil
}

// send queues WAIT behind eval, a script call already queued on pipe, and
// sends both; it returns them, their replies set.
func (r Replication) send(ctx context.Context, pipe redis.Pipeliner, eval *redis.Cmd) (*redis.Cmd, *redis.Cmd) {
	timeout := max(r.Timeout, time.Millisecond)
	wait := pipe.Do(ctx, "wait", r.Replicas, timeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // errors are read per command
	return eval, wait
}
