package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/pubsub"
)

// RoutingResult is what Routing and RoutingBatch measured.
type RoutingResult struct {
	// Latency is, per message sent one at a time, the time from the call of
	// Router.Send until the slave's handler was called (Routing only).
	Latency []time.Duration
	// Messages, Senders and Elapsed: the throughput run sent Messages
	// messages from Senders goroutines of the master, spread evenly over the
	// slaves, and every handler had seen its share after Elapsed.
	Messages, Senders int
	Elapsed           time.Duration
	// Batch is the number of messages per Router.SendBatch call; 0 when the
	// messages were sent with Router.Send.
	Batch int
	// Calls is the number of SendBatch calls' script calls (round trips);
	// 0 with Send, where it is one per message.
	Calls int
	// CPU is what the throughput run cost per message.
	CPU CPU
	// Script is the mean time Redis spent executing one script call
	// (EVALSHA, the commands it ran included) during the throughput run,
	// from INFO commandstats; zero when not measured (DurableRouting
	// measures it).
	Script time.Duration
}

// meterScripts starts counting the server's EVALSHA calls and the time it
// spent in them; the function it returns gives the mean time per call
// since (zero when INFO commandstats could not be read or no call was
// made).
func meterScripts(ctx context.Context, admin redis.UniversalClient) func() time.Duration {
	read := func() (int64, int64, bool) {
		info, err := admin.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, 0, false
		}
		calls, usec, _ := benchkit.CommandUsec(info, "evalsha") // absent: no call yet
		return calls, usec, true
	}
	c0, u0, ok0 := read()
	return func() time.Duration {
		c1, u1, ok1 := read()
		if !ok0 || !ok1 || c1 <= c0 {
			return 0
		}
		return time.Duration(u1-u0) * time.Microsecond / time.Duration(c1-c0)
	}
}

// CPU is the CPU time a throughput run took per message: this process's
// (the master's senders and every slave's receiver, which run in it) and
// the server's (INFO cpu). On a machine whose cores they share, throughput
// is bounded by their sum, whatever the round trips.
type CPU struct {
	Process, Server time.Duration
}

// String is the notes' form, this process's then Redis's: "41µs/19µs".
func (c CPU) String() string {
	if c == (CPU{}) {
		return "not measured"
	}
	return fmt.Sprintf("%v/%v", c.Process.Round(100*time.Nanosecond), c.Server.Round(100*time.Nanosecond))
}

// meterCPU starts counting this process's and the server's CPU time; the
// function it returns gives what each used per message for n messages
// since. A zero CPU (and no error) when either cannot be read.
func meterCPU(ctx context.Context, admin redis.UniversalClient) func(n int) CPU {
	p0, ok0 := processCPU()
	s0, err0 := serverCPU(ctx, admin)
	return func(n int) CPU {
		p1, ok1 := processCPU()
		s1, err1 := serverCPU(ctx, admin)
		if !ok0 || !ok1 || err0 != nil || err1 != nil || n <= 0 {
			return CPU{}
		}
		return CPU{Process: (p1 - p0) / time.Duration(n), Server: time.Duration((s1 - s0) * float64(time.Second) / float64(n))}
	}
}

// Rate is the throughput in messages per second.
func (r RoutingResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

type benchPayload struct {
	Seq int `json:"seq"`
}

// rawPayload is what the raw floors send: about the size of a routed
// envelope.
var rawPayload = bytes.Repeat([]byte{'x'}, 200)

// startRaw checks the sizes of the raw floor what and returns a prefix for
// its keys (a fresh lock name of env, after name), the client that sends
// (the caller closes it) and the tally of its messages.
func startRaw(env *Env, what, name string, slaves, messages, senders, batch int) (string, *redis.Client, *tally, error) {
	if slaves < 1 || senders < 1 || batch < 1 {
		return "", nil, nil, fmt.Errorf("%s needs at least 1 slave, sender and batch, got %d, %d, %d", what, slaves, senders, batch)
	}
	return env.LockName(name), env.NewClient(), newTally(messages), nil
}

// tally counts the messages of a throughput run as they arrive, and closes
// done when their count reaches target.
type tally struct {
	received, target atomic.Int64
	done             chan struct{}
	once             sync.Once
}

// newTally returns a tally of target messages; 0: set target later.
func newTally(target int) *tally {
	t := &tally{done: make(chan struct{})}
	t.target.Store(int64(target))
	return t
}

// add counts n messages.
func (t *tally) add(n int) {
	if t.received.Add(int64(n)) == t.target.Load() {
		t.once.Do(func() { close(t.done) })
	}
}

// wait returns the time from t0 until every message had arrived; an error
// names what the run did and how far it got when that takes more than 30s
// or ctx ends.
func (t *tally) wait(ctx context.Context, t0 time.Time, what, arrived string) (time.Duration, error) {
	select {
	case <-t.done:
		return time.Since(t0), nil
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("%s: %d of %d messages %s within 30s", what, t.received.Load(), t.target.Load(), arrived)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// routingRig is a master (a MasterElection with a pub/sub or a durable
// Router on its client) and its slaves, each with its own client, as
// separate processes. Their "lat" handler hands its time to latCh; their
// "tput" handler counts into the tally of the throughput run.
type routingRig struct {
	// send and sendBatch are the master's Router's Send and SendBatch.
	send      func(ctx context.Context, slaveID, msgType string, payload any) error
	sendBatch func(ctx context.Context, msgs []pubsub.Outgoing) (pubsub.BatchResult, error)

	*tally
	ids     []string
	latCh   chan time.Time
	closers []func()
}

// startRig starts a rig of slaves slaves on a fresh lock named after
// what: its master, the only candidate of the lock, then the rest with
// start, which sets send and sendBatch and starts the slaves (startSlaves).
// On error, what was started is stopped.
func startRig(ctx context.Context, env *Env, what string, slaves int, start func(g *routingRig, master *node, lock string) error) (*routingRig, error) {
	g := &routingRig{tally: newTally(0), latCh: make(chan time.Time, 1), ids: slaveIDs(slaves)}
	lock := env.LockName(what)
	master, err := g.startMaster(ctx, env, lock)
	if err == nil {
		err = start(g, master, lock)
	}
	if err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

// slaveIDs returns the ids of n slaves: "slave-0", "slave-1" …
func slaveIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("slave-%d", i)
	}
	return ids
}

// receiver is a slave's receiving end in a rig, a pub/sub Subscriber or a
// durable Consumer; H is its handler type.
type receiver[H any] interface {
	Handle(msgType string, h H) error
	Start(ctx context.Context) error
	Close() error
}

// startSlaves starts a receiver per slave of the rig, which newReceiver
// makes on a client of the slave's own, with the rig's "lat" and "tput"
// handlers, which handler makes of arrived and counted; the rig closes
// them.
func startSlaves[H any, R receiver[H]](ctx context.Context, env *Env, g *routingRig, newReceiver func(c *redis.Client, id string) (R, error), handler func(work func()) H) error {
	for _, id := range g.ids {
		c := env.NewClient()
		g.closers = append(g.closers, func() { _ = c.Close() })
		r, err := newReceiver(c, id)
		if err != nil {
			return err
		}
		if err := r.Handle("lat", handler(g.arrived)); err != nil {
			return err
		}
		if err := r.Handle("tput", handler(g.counted)); err != nil {
			return err
		}
		if err := r.Start(ctx); err != nil {
			return fmt.Errorf("start the receiver of %s: %w", id, err)
		}
		g.closers = append(g.closers, func() { _ = r.Close() })
	}
	return nil
}

// startMaster starts the rig's master, the only candidate of lock.
func (g *routingRig) startMaster(ctx context.Context, env *Env, lock string) (*node, error) {
	master, err := newWarmNode(ctx, env, Timings(lock, "router", 30*time.Second))
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, func() { master.close(ctx) })
	if err := master.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the master: %w", err)
	}
	if !master.IsMaster() {
		return nil, errors.New("the only candidate of a fresh lock is not master")
	}
	return master, nil
}

// arrived is the "lat" handler's work: it hands the arrival time to latCh
// when the measuring loop waits for it.
func (g *routingRig) arrived() {
	select {
	case g.latCh <- time.Now():
	default:
	}
}

// counted is the "tput" handler's work: it counts one message.
func (g *routingRig) counted() { g.add(1) }

// close stops the slaves and the master, in the reverse order of start.
func (g *routingRig) close() {
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
}

// startRouting starts the master and slaves Subscribers. On error, what was
// started is stopped.
func startRouting(ctx context.Context, env *Env, slaves int) (*routingRig, error) {
	return startRig(ctx, env, "routing", slaves, func(g *routingRig, master *node, lock string) error {
		cfg := pubsub.Config{LockName: lock}
		router, err := pubsub.NewRouter(master.client, master, nil, cfg)
		if err != nil {
			return err
		}
		g.send, g.sendBatch = router.Send, router.SendBatch
		return startSlaves(ctx, env, g, func(c *redis.Client, id string) (*pubsub.Subscriber, error) {
			return pubsub.NewSubscriber(c, id, cfg)
		}, func(work func()) pubsub.Handler {
			return func(context.Context, pubsub.Message) error { work(); return nil }
		})
	})
}

// latency sends n messages one at a time, round-robin over the slaves
// (after a tenth as many, at most 100, to warm up), and returns for each
// the time from the call of send until the slave's handler was called.
func (g *routingRig) latency(ctx context.Context, n int) ([]time.Duration, error) {
	var out []time.Duration
	warm := min(n/10, 100)
	for i := range warm + n {
		t0 := time.Now()
		if err := g.send(ctx, g.ids[i%len(g.ids)], "lat", benchPayload{Seq: i}); err != nil {
			return out, fmt.Errorf("send: %w", err)
		}
		select {
		case at := <-g.latCh:
			if i >= warm {
				out = append(out, at.Sub(t0))
			}
		case <-time.After(5 * time.Second):
			return out, fmt.Errorf("message %d not handled within 5s", i)
		}
	}
	return out, nil
}

// sendEach is a throughput sender: one send per message.
func (g *routingRig) sendEach(ctx context.Context) func(batch []int) error {
	return func(batch []int) error {
		for _, i := range batch {
			if err := g.send(ctx, g.ids[i%len(g.ids)], "tput", benchPayload{Seq: i}); err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
		return nil
	}
}

// sendBatches is a throughput sender: one sendBatch call per batch, whose
// script calls it adds to calls.
func (g *routingRig) sendBatches(ctx context.Context, calls *atomic.Int64) func(batch []int) error {
	return func(batch []int) error {
		out := make([]pubsub.Outgoing, 0, len(batch))
		for _, i := range batch {
			out = append(out, pubsub.Outgoing{SlaveID: g.ids[i%len(g.ids)], Type: "tput", Payload: benchPayload{Seq: i}})
		}
		r, err := g.sendBatch(ctx, out)
		calls.Add(int64(r.Calls))
		if err == nil {
			err = r.Err()
		}
		if err != nil {
			return fmt.Errorf("send batch: %w", err)
		}
		return nil
	}
}

// throughput sends messages messages with send by senders goroutines,
// batch at a time (sendShares), and times until every slave's handler has
// seen its share. The rig measures one throughput run.
func (g *routingRig) throughput(ctx context.Context, messages, senders, batch int, send func(batch []int) error) (time.Duration, error) {
	g.target.Store(int64(messages))
	t0 := time.Now()
	if err := sendShares(messages, senders, batch, send); err != nil {
		return 0, err
	}
	return g.wait(ctx, t0, "throughput", "handled")
}

// sendShares has senders goroutines send messages messages, batch at a
// time: sender w takes the indexes w, w+senders, ... and calls send with up
// to batch of them at a time, in order, until its share is sent or send
// fails. It returns once every sender has returned, with their errors.
func sendShares(messages, senders, batch int, send func(batch []int) error) error {
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for w := range senders {
		mine := make([]int, 0, messages/senders+1)
		for i := w; i < messages; i += senders {
			mine = append(mine, i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(mine) > 0 {
				n := min(batch, len(mine))
				if err := send(mine[:n]); err != nil {
					errs <- err
					return
				}
				mine = mine[n:]
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// Routing starts a master and slaves (startRouting), then measures latency
// Send → handler for latencyN messages sent one at a time round-robin, and
// the throughput of messages messages sent with Router.Send by senders
// goroutines at once.
func Routing(ctx context.Context, env *Env, slaves, latencyN, messages, senders int) (RoutingResult, error) {
	res := RoutingResult{Messages: messages, Senders: senders}
	if slaves < 1 || senders < 1 {
		return res, fmt.Errorf("routing needs at least 1 slave and 1 sender, got %d and %d", slaves, senders)
	}
	g, err := startRouting(ctx, env, slaves)
	if err != nil {
		return res, err
	}
	defer g.close()

	if res.Latency, err = g.latency(ctx, latencyN); err != nil {
		return res, err
	}
	admin := env.NewClient()
	defer admin.Close()
	meter := meterCPU(ctx, admin)
	res.Elapsed, err = g.throughput(ctx, messages, senders, 1, g.sendEach(ctx))
	res.CPU = meter(messages)
	return res, err
}

// RoutingBatch measures the throughput of messages messages sent with
// Router.SendBatch, batch messages per call, by senders goroutines at once,
// from a master to slaves (startRouting), spread evenly over the slaves.
// Every message must be delivered.
func RoutingBatch(ctx context.Context, env *Env, slaves, messages, senders, batch int) (RoutingResult, error) {
	res := RoutingResult{Messages: messages, Senders: senders, Batch: batch}
	if slaves < 1 || senders < 1 || batch < 1 {
		return res, fmt.Errorf("batch routing needs at least 1 slave, sender and message per batch, got %d, %d, %d", slaves, senders, batch)
	}
	g, err := startRouting(ctx, env, slaves)
	if err != nil {
		return res, err
	}
	defer g.close()
	var calls atomic.Int64
	admin := env.NewClient()
	defer admin.Close()
	meter := meterCPU(ctx, admin)
	res.Elapsed, err = g.throughput(ctx, messages, senders, batch, g.sendBatches(ctx, &calls))
	res.Calls = int(calls.Load())
	res.CPU = meter(messages)
	return res, err
}

// RawPublish is the floor under row 9's throughput: plain PUBLISH of a
// payload of the same size to slaves plain go-redis subscriptions (one
// connection each), sent by senders goroutines, batch messages per round
// trip (1: one PUBLISH per round trip, as Router.Send). It returns the
// messages per second until every subscriber had its share, and what they
// cost per message.
func RawPublish(ctx context.Context, env *Env, slaves, messages, senders, batch int) (float64, CPU, error) {
	prefix, pub, arrived, err := startRaw(env, "raw publish", "raw", slaves, messages, senders, batch)
	if err != nil {
		return 0, CPU{}, err
	}
	defer pub.Close()
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	defer wg.Wait()
	defer cancel()
	channels := make([]string, slaves)
	for i := range slaves {
		channels[i] = fmt.Sprintf("%s:slave-%d", prefix, i)
		c := env.NewClient()
		defer c.Close()
		ps := c.Subscribe(ctx, channels[i])
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			return 0, CPU{}, fmt.Errorf("subscribe: %w", err)
		}
		ch := ps.Channel(redis.WithChannelSize(1000))
		wg.Add(1)
		go func() {
			defer wg.Done()
			readMessages(rctx, ch, func(*redis.Message) { arrived.add(1) })
		}()
	}
	meter := meterCPU(ctx, pub)
	t0 := time.Now()
	err = sendShares(messages, senders, batch, func(idx []int) error {
		if len(idx) == 1 {
			return pub.Publish(ctx, channels[idx[0]%slaves], rawPayload).Err()
		}
		_, err := pub.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				p.Publish(ctx, channels[i%slaves], rawPayload)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return 0, CPU{}, err
	}
	d, err := arrived.wait(ctx, t0, "raw publish", "received")
	if err != nil {
		return 0, CPU{}, err
	}
	return float64(messages) / d.Seconds(), meter(messages), nil
}
