package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// startDurable starts a master with a durable.Router and slaves
// durable.Consumers, whose handlers feed the rig as startRouting's
// Subscribers do, so the runs are timed as routing's. On error, what was
// started is stopped.
func startDurable(ctx context.Context, env *Env, slaves int) (*routingRig, error) {
	return startRig(ctx, env, "durable", slaves, func(g *routingRig, master *node, lock string) error {
		cfg := durable.Config{LockName: lock, Block: 100 * time.Millisecond}
		router, err := durable.NewRouter(master.client, master, nil, cfg)
		if err != nil {
			return err
		}
		g.send = func(ctx context.Context, slaveID, msgType string, payload any) error {
			_, err := router.Send(ctx, slaveID, msgType, payload)
			return err
		}
		g.sendBatch = func(ctx context.Context, msgs []pubsub.Outgoing) (pubsub.BatchResult, error) {
			r, err := router.SendBatch(ctx, msgs)
			return pubsub.BatchResult(r), err // the same outcomes, without durable's Stored
		}
		// A send reaches only a live process: each slave is registered as its
		// election would register it, on the backend the server offers.
		if err := registerSlaves(ctx, master.client, keyspace.NewKeys(lock, false), g.ids); err != nil {
			return err
		}
		// The inboxes go when the rig closes, after the Consumers.
		g.closers = append(g.closers, func() {
			inboxes := make([]string, len(g.ids))
			for i, id := range g.ids {
				inboxes[i] = router.Inbox(id)
			}
			_ = master.client.Del(context.WithoutCancel(ctx), inboxes...).Err()
		})
		return startSlaves(ctx, env, g, func(c *redis.Client, id string) (*durable.Consumer, error) {
			return durable.NewConsumer(c, id, cfg)
		}, func(work func()) durable.Handler {
			return func(context.Context, durable.Delivery) error { work(); return nil }
		})
	})
}

// DurableRouting measures durable routing as Routing and RoutingBatch
// measure pub/sub: the latency Router.Send → handler for latencyN messages
// sent one at a time round-robin, then the throughput of messages messages
// sent with Router.Send by senders goroutines, then with Router.SendBatch,
// batch messages per call. Each message is acknowledged by its Consumer
// (XDEL + XACK, with its next read).
func DurableRouting(ctx context.Context, env *Env, slaves, latencyN, messages, senders, batch int) (single, batched RoutingResult, err error) {
	single = RoutingResult{Messages: messages, Senders: senders}
	batched = RoutingResult{Messages: messages, Senders: senders, Batch: batch}
	if slaves < 1 || senders < 1 || batch < 1 {
		return single, batched, fmt.Errorf("durable routing needs at least 1 slave, sender and message per batch, got %d, %d, %d", slaves, senders, batch)
	}
	if err := durableSingle(ctx, env, slaves, latencyN, &single); err != nil {
		return single, batched, err
	}
	// The batched run on a rig of its own (fresh inboxes and counters).
	g, err := startDurable(ctx, env, slaves)
	if err != nil {
		return single, batched, err
	}
	defer g.close()
	var calls atomic.Int64
	admin := env.NewClient()
	defer admin.Close()
	meter, inside := meterCPU(ctx, admin), meterScripts(ctx, admin)
	batched.Elapsed, err = g.throughput(ctx, messages, senders, batch, g.sendBatches(ctx, &calls))
	batched.CPU, batched.Script = meter(messages), inside()
	batched.Calls = int(calls.Load())
	return single, batched, err
}

// durableSingle runs the latency and Router.Send throughput part of
// DurableRouting on a rig of its own.
func durableSingle(ctx context.Context, env *Env, slaves, latencyN int, res *RoutingResult) error {
	g, err := startDurable(ctx, env, slaves)
	if err != nil {
		return err
	}
	defer g.close()
	if res.Latency, err = g.latency(ctx, latencyN); err != nil {
		return err
	}
	admin := env.NewClient()
	defer admin.Close()
	meter, inside := meterCPU(ctx, admin), meterScripts(ctx, admin)
	defer func() { res.CPU, res.Script = meter(res.Messages), inside() }()
	res.Elapsed, err = g.throughput(ctx, res.Messages, res.Senders, 1, g.sendEach(ctx))
	return err
}

// RawStreams is the floor under the durable rows: plain XADD of a payload
// of the same size to slaves streams, batch entries per round trip (1: one
// XADD per round trip, as Router.Send; more: pipelined), by senders
// goroutines; each slave reads its stream with XREADGROUP (COUNT 64, its
// own client) and acknowledges each read with one XACK of all its ids. It
// returns the messages per second until every slave had read its share.
func RawStreams(ctx context.Context, env *Env, slaves, messages, senders, batch int) (float64, error) {
	prefix, pub, arrived, err := startRaw(env, "raw streams", "rawstream", slaves, messages, senders, batch)
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	var clients []*redis.Client
	streams := make([]string, slaves)
	defer func() { // the readers stop before their clients close
		cancel()
		wg.Wait()
		for _, c := range clients {
			_ = c.Del(context.WithoutCancel(ctx), streams...).Err()
			_ = c.Close()
		}
	}()
	for i := range slaves {
		streams[i] = fmt.Sprintf("%s:slave-%d", prefix, i)
		c := env.NewClient()
		clients = append(clients, c)
		if err := c.XGroupCreateMkStream(ctx, streams[i], "g", "0").Err(); err != nil {
			return 0, fmt.Errorf("create group: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				res, err := c.XReadGroup(rctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{streams[i], ">"}, Count: 64, Block: 100 * time.Millisecond}).Result()
				if err != nil || len(res) == 0 {
					continue
				}
				ids := make([]string, len(res[0].Messages))
				for j, m := range res[0].Messages {
					ids[j] = m.ID
				}
				if len(ids) == 0 {
					continue
				}
				c.XAck(rctx, streams[i], "g", ids...)
				arrived.add(len(ids))
			}
		}()
	}
	t0 := time.Now()
	err = sendShares(messages, senders, batch, func(idx []int) error {
		_, err := pub.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				p.XAdd(ctx, &redis.XAddArgs{Stream: streams[i%slaves], Values: []any{"m", rawPayload}})
			}
			return nil
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	d, err := arrived.wait(ctx, t0, "raw streams", "read")
	if err != nil {
		return 0, err
	}
	return float64(messages) / d.Seconds(), nil
}

// durableRows are rows 9f to 9j: durable routing (package durable) beside
// pub/sub's rows 9a to 9e, and the bare streams floor under them.
func durableRows(ctx context.Context, env *Env, plan Plan) []Row {
	single, batched, err := DurableRouting(ctx, env, plan.Slaves, plan.RouteLatencyN, plan.RouteMessages, plan.RouteSenders, plan.RouteBatch)
	lat := LatencyRow("9f", fmt.Sprintf("durable routed message latency: durable Router.Send → slave handler, 1 master, %d slaves", plan.Slaves), single.Latency, "—", "")
	tput := Row{ID: "9g", What: fmt.Sprintf("durable routed message throughput, 1 master → %d slaves", plan.Slaves), N: single.Messages,
		Value: fmt.Sprintf("%.0f msg/s", single.Rate()), Goal: "—"}
	bt := Row{ID: "9h", What: fmt.Sprintf("durable routed message throughput with SendBatch, %d messages per call, 1 master → %d slaves", batched.Batch, plan.Slaves), N: batched.Messages,
		Value: fmt.Sprintf("%.0f msg/s", batched.Rate()), Goal: "—"}
	lat.Err, tput.Err, bt.Err = err, err, err
	rows := []Row{lat, tput, bt}
	for _, batch := range []int{1, plan.RouteBatch} {
		rate, err := RawStreams(ctx, env, plan.Slaves, plan.RouteMessages, plan.RouteSenders, batch)
		r := Row{N: plan.RouteMessages, Value: fmt.Sprintf("%.0f msg/s", rate), Goal: "—", Err: err}
		if batch == 1 {
			r.ID, r.What = "9i", "floor under 9g: plain XADD, one per round trip, read with XREADGROUP"
		} else {
			r.ID, r.What = "9j", fmt.Sprintf("floor under 9h: plain XADD pipelined, %d per round trip", batch)
		}
		rows = append(rows, r)
	}
	return group(fmt.Sprintf("As 9a-9e, durable: durable.Router's inbox_send script (fence check; the slave's registry entry: HEXISTS, plus ZSCORE of its deadline and TIME on the emulated backend; XLEN; XADD NOMKSTREAM, and SADD to the inbox set only when the inbox is new); registered slaves, each with a durable.Consumer on its own client (XREADGROUP BLOCK; after the handler, XDEL + XACK sent with the next XREADGROUP in one round trip). 9h: %d calls, each one fence check plus a registry lookup per slave written to. 9g %v, 9h %v; CPU per message, this process/Redis: 9g %v, 9h %v; inside Redis per EVALSHA (INFO commandstats; inbox_send and the elections' few): 9g %s, 9h %s. 9i-9j: as 9c-9d with XADD to a stream per slave, read with XREADGROUP COUNT 64, one XACK per read (no handler, per-message acknowledgement or fence).",
		batched.Calls, single.Elapsed.Round(time.Millisecond), batched.Elapsed.Round(time.Millisecond), single.CPU, batched.CPU, benchkit.FormatDuration(single.Script), benchkit.FormatDuration(batched.Script)), rows)
}
