package rdb

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

// Route runs route.lua: it publishes msg to every channel if nodeID still
// holds the lock under term, and returns the number of receivers of each
// channel, in order. It returns keyspace.ErrFenced, and publishes nothing, otherwise.
func Route(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, msg []byte, channels ...string) ([]int64, error) {
	reply, err := run(ctx, c, routeScript, "route", []string{k.Master, k.Term}, argv(channels, nodeID, termArg(term), msg)...)
	if err != nil {
		return nil, err
	}
	return routeCounts("route", reply, len(channels), func() string { return fmt.Sprintf("route as %q with term %d", nodeID, term) })
}

// routeCounts reads the reply of route.lua or route_batch.lua: n receiver
// counts, or -1 when the sender was fenced (an error wrapping keyspace.ErrFenced,
// prefixed with what fenced returns: it is formatted only then, not on
// every message).
func routeCounts(name string, reply any, n int, fenced func() string) ([]int64, error) {
	if reply == int64(-1) {
		return nil, fmt.Errorf("%s: %w", fenced(), keyspace.ErrFenced)
	}
	f := fieldsOf(reply, n)
	counts := make([]int64, n)
	for i := range counts {
		counts[i] = f.countAt(i)
	}
	if !f.ok {
		return nil, unexpected(name, reply)
	}
	return counts, nil
}

// Routed is one message of RouteBatch: the bytes to publish and the channel
// to publish them to.
type Routed struct {
	// Channel is the channel to PUBLISH to (worker:slave:<id>).
	Channel string
	// Message is what to publish: the JSON envelope.
	Message []byte
}

// RouteBatch runs route_batch.lua: if nodeID still holds the lock under
// term, it publishes every message to its channel, in order, in one atomic
// step, and returns the number of receivers of each message, in order. It
// returns keyspace.ErrFenced, and publishes nothing, otherwise. An empty msgs makes no
// call and returns nil counts and a nil error.
//
// The whole batch travels in one command: callers bound its size (pubsub
// splits batches into calls of at most pubsub.MaxBatchChunk messages).
func RouteBatch(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, msgs []Routed) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2+2*len(msgs))
	args = append(args, nodeID, termArg(term))
	for _, m := range msgs {
		args = append(args, m.Channel, m.Message)
	}
	reply, err := run(ctx, c, routeBatchScript, "route batch", []string{k.Master, k.Term}, args...)
	if err != nil {
		return nil, err
	}
	return routeCounts("route batch", reply, len(msgs), func() string {
		return fmt.Sprintf("route batch of %d messages as %q with term %d", len(msgs), nodeID, term)
	})
}
