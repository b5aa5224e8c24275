package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/masterelection"
)

// sendPlan sizes the durable-send comparison: rounds rounds, each of herd's
// sends, then asynq's enqueues, then the two taking turns in blocks
// (interleavedSends); in each, messages sends one at a time to workers
// workers that handle one message at a time.
type sendPlan struct {
	messages, workers, rounds int
}

// job is the payload of every message: what a web backend hands a worker.
type job struct {
	N    int    `json:"n"`
	Kind string `json:"kind"`
}

// sendRound is what one round of one sender measured.
type sendRound struct {
	calls   []time.Duration // each Send or Enqueue call
	started time.Time       // the first call
	elapsed time.Duration   // first call → every message handled
	// inside is, per command of insideCommands, the calls Redis ran during
	// the sends and the microseconds it spent in them (INFO commandstats):
	// EVALSHA's whole time, and the commands scripts ran.
	inside map[string]usage
}

// usage is one command's calls and microseconds.
type usage struct{ calls, usec int64 }

// insideCommands are the commands whose time inside Redis the rounds
// report: the script calls, and what inbox_send.lua runs.
var insideCommands = []string{"evalsha", "get", "hexists", "zscore", "time", "xlen", "xadd", "sadd"}

// sendTotals pools the rounds of one sender.
type sendTotals struct {
	calls    []time.Duration
	messages int
	elapsed  time.Duration
	inside   map[string]usage
	err      error
}

func (t *sendTotals) add(r sendRound, n int, err error) {
	if err != nil {
		t.err = errors.Join(t.err, err)
		return
	}
	t.calls = append(t.calls, r.calls...)
	t.messages += n
	t.elapsed += r.elapsed
	if t.inside == nil {
		t.inside = map[string]usage{}
	}
	for cmd, u := range r.inside {
		t.inside[cmd] = usage{t.inside[cmd].calls + u.calls, t.inside[cmd].usec + u.usec}
	}
}

// rate is the end-to-end throughput, messages per second.
func (t *sendTotals) rate() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.messages) / t.elapsed.Seconds()
}

// perScript is the mean time Redis spent in one script call.
func (t *sendTotals) perScript() time.Duration { return t.per("evalsha", t.inside["evalsha"].calls) }

// per is the time Redis spent in cmd over the rounds, per n calls of the
// script (0 without calls).
func (t *sendTotals) per(cmd string, n int64) time.Duration {
	if n == 0 {
		return 0
	}
	return time.Duration(t.inside[cmd].usec) * time.Microsecond / time.Duration(n)
}

// breakdown tells, per script call, the calls and time of each command a
// script ran: "GET 2.00 × 0.25µs, ...".
func (t *sendTotals) breakdown() string {
	n := t.inside["evalsha"].calls
	var parts []string
	for _, cmd := range insideCommands[1:] {
		u := t.inside[cmd]
		if u.calls == 0 || n == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f in %s", strings.ToUpper(cmd), float64(u.calls)/float64(n), benchkit.FormatDuration(t.per(cmd, n))))
	}
	if len(parts) == 0 {
		return "none counted"
	}
	return strings.Join(parts, ", ")
}

// sendRows measures a durable Router.Send beside asynq's Client.Enqueue, the
// Redis task queue Go users pick to hand work to workers at least once, and
// beside a plain XADD, on the server at addr.
func sendRows(ctx context.Context, addr string, plan sendPlan) []row {
	var herd, alone, queue sendTotals
	var turns turnCalls
	var turnsErr error
	for i := range plan.rounds {
		r, a, err := herdSends(ctx, addr, plan, i)
		herd.add(r, plan.messages, err)
		alone.add(a, plan.messages, err)
		r, err = asynqSends(ctx, addr, plan)
		queue.add(r, plan.messages, err)
		if turnsErr == nil {
			t, err := interleavedSends(ctx, addr, plan, i)
			turns.herd, turns.queue = append(turns.herd, t.herd...), append(turns.queue, t.queue...)
			turns.herdAlone, turns.queueAlone = append(turns.herdAlone, t.herdAlone...), append(turns.queueAlone, t.queueAlone...)
			if err != nil {
				// Later rounds do not take turns: asynq's queue may still
				// hold this round's tasks.
				turnsErr = fmt.Errorf("round %d of %d (the later ones skipped): %w", i+1, plan.rounds, err)
			}
		}
	}
	xadd, xaddUsec, xerr := xaddCalls(ctx, addr, plan.messages)

	call := &row{id: "5a", what: "durable send call: Router.Send of one message, one at a time, slaves reading", peer: "herd", store: "redis", s: benchkit.Summarize(herd.calls), err: herd.err,
		note: fmt.Sprintf("A master (masterelection.New, default timings) with a durable.Router on its client; %d slaves (NonCandidate elections) each with a durable.Consumer (Terms and Holds set from its election, defaults otherwise) whose handler does nothing, all in this process; %d rounds of %d sends, taking turns with asynq's, round-robin over the slaves, each Send timed on its own. The payload is a small struct, JSON-encoded by Send. Each send wakes a Consumer, whose read, handler and acknowledgement share the two cores with the next send.", plan.workers, plan.rounds, plan.messages)}
	quiet := &row{id: "5c", what: "durable send call: Router.Send of one message, one at a time, no slave reading", peer: "herd", store: "redis", s: benchkit.Summarize(alone.calls), err: alone.err,
		note: fmt.Sprintf("After each 5a round, its Consumers closed, %d more sends as 5a's: the condition asynq's enqueues (5b) run in, whose workers look for tasks only a random 0.5-1.5 s after they found none. herd ÷ asynq p50: %s.", plan.messages, ratioText(alone.calls, queue.calls))}
	tput := &row{id: "5e", what: "durable end to end: sequential Router.Send → every message handled", peer: "herd", store: "redis", err: herd.err,
		value: fmt.Sprintf("%.0f msg/s", herd.rate()), x: 1 / herd.rate(),
		note: "As 5a: from the first Send of a round until each slave's handler ran for every message of the round, summed over the rounds."}
	insideNote := "INFO commandstats over the sends: %d script calls (the sends, and the elections' few renewals and heartbeats among them), %d µs in all. Per call, the commands the scripts ran (how many, then their own time; the rest of the script's time is Lua, calling them and the call itself): %s."
	inTurns := &row{id: "5j", what: "durable send call, taking turns: Router.Send, slaves reading, in blocks beside 5k's", peer: "herd", store: "redis", s: benchkit.Summarize(turns.herd), err: turnsErr,
		note: fmt.Sprintf("As 5a, with asynq's Client and Server (5b's) set up beside it: after both warmed up, blocks of %d sends and %d enqueues (5k) take turns, the side that goes first alternating, until each made %d per round, so that what slows this VM for a while falls on both; 5a and 5b, measured one round after the other, can land in different spells (round trips here run 20-90µs depending on the spell).", turnBlock, turnBlock, plan.messages)}
	aloneTurns := &row{id: "5l", what: "durable send call, taking turns: Router.Send, no slave reading, in blocks beside 5m's", peer: "herd", store: "redis", s: benchkit.Summarize(turns.herdAlone), err: turnsErr,
		note: "After 5j's blocks, herd's Consumers closed (5c's condition), blocks as 5j's. asynq's workers look for tasks again only 0.5-1.5 s after they found none, so in 5k and 5m, as in 5b, they may handle the enqueued tasks after the blocks rather than during them."}
	return []row{*call,
		{id: "5b", what: "task enqueue call: Client.Enqueue of one task, one at a time", peer: "hibiken/asynq", store: "redis", s: benchkit.Summarize(queue.calls), err: queue.err, herd: call, goal50: 1,
			note: fmt.Sprintf("asynq's Client and a Server with Concurrency %d (one queue, defaults otherwise) whose handler does nothing; rounds as 5a's, the same payload JSON-encoded by the caller.", plan.workers)},
		*quiet,
		{id: "5d", what: "plain XADD of one entry, one at a time", peer: "go-redis", store: "redis", s: benchkit.Summarize(xadd), err: xerr, herd: call,
			note: fmt.Sprintf("The floor under 5a: XADD of an entry of the size of 5a's (fields t and m, a 160-byte value) to a stream nobody reads; %s inside Redis per call.", benchkit.FormatDuration(xaddUsec))},
		*tput,
		{id: "5f", what: "task queue end to end: sequential Enqueue → every task handled", peer: "hibiken/asynq", store: "redis", err: queue.err, herd: tput, goal50: 1,
			value: fmt.Sprintf("%.0f msg/s", queue.rate()), x: 1 / queue.rate(),
			note: "As 5e. asynq's workers look for tasks again a random 0.5-1.5 s after they found none (its TaskCheckInterval, 1 s by default), which counts here as it would for a user. herd ÷ peer compares the time per message."},
		{id: "5g", what: "durable send inside Redis: EVALSHA time per call (inbox_send), slaves reading", peer: "herd", store: "redis", err: herd.err,
			value: benchkit.FormatDuration(herd.perScript()), goalText: "≤ 10µs", metText: metIf(herd.err == nil && herd.perScript() <= 10*time.Microsecond),
			note: fmt.Sprintf("5a's sends. "+insideNote+" Redis's clock runs on while the consumers' threads take the core from it.", herd.inside["evalsha"].calls, herd.inside["evalsha"].usec, herd.breakdown())},
		{id: "5h", what: "durable send inside Redis: EVALSHA time per call (inbox_send), no slave reading", peer: "herd", store: "redis", err: alone.err,
			value: benchkit.FormatDuration(alone.perScript()), goalText: "≤ 10µs", metText: metIf(alone.err == nil && alone.perScript() <= 10*time.Microsecond),
			note: fmt.Sprintf("5c's sends. "+insideNote, alone.inside["evalsha"].calls, alone.inside["evalsha"].usec, alone.breakdown())},
		*inTurns,
		{id: "5k", what: "task enqueue call, taking turns: Client.Enqueue, workers running, in blocks beside 5j's", peer: "hibiken/asynq", store: "redis", s: benchkit.Summarize(turns.queue), err: turnsErr, herd: inTurns, goal50: 1,
			note: "As 5b, in 5j's blocks."},
		*aloneTurns,
		{id: "5m", what: "task enqueue call, taking turns: Client.Enqueue, workers running, in blocks beside 5l's", peer: "hibiken/asynq", store: "redis", s: benchkit.Summarize(turns.queueAlone), err: turnsErr, herd: aloneTurns, goal50: 1,
			note: "As 5b, in 5l's blocks."},
		{id: "5i", what: "task enqueue inside Redis: EVALSHA time per call", peer: "hibiken/asynq", store: "redis", err: queue.err,
			value: benchkit.FormatDuration(queue.perScript()),
			note:  fmt.Sprintf("As 5g over 5b's enqueues: %d script calls (the enqueues, and any of the workers' dequeues and completions among them), %d µs in all.", queue.inside["evalsha"].calls, queue.inside["evalsha"].usec)},
	}
}

// ratioText is a's p50 over b's: "0.92×"; "—" without samples.
func ratioText(a, b []time.Duration) string {
	sa, sb := benchkit.Summarize(a), benchkit.Summarize(b)
	if sa.N == 0 || sb.N == 0 || sb.P50 <= 0 {
		return "—"
	}
	return benchkit.FormatRatio(float64(sa.P50) / float64(sb.P50))
}

// wrap prefixes err, when there is one, with who.
func wrap(who string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	return nil
}

// metIf is a goal's "met" cell.
func metIf(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// sender is one side of a comparison, set up and ready: send makes one
// call (numbered i), handled counts the messages its workers handled,
// quiet closes its workers (nil when it has none to close apart), and
// close tears everything down.
type sender struct {
	send    func(ctx context.Context, i int) error
	handled *atomic.Int64
	admin   *redis.Client // reads INFO commandstats around the calls
	quiet   func()
	close   func()
}

// herdSender sets up a master with a durable.Router and plan.workers slaves,
// each with a durable.Consumer, on a lock of its own (named after round).
func herdSender(ctx context.Context, addr string, plan sendPlan, round string) (*sender, error) {
	lock := "herdpeers-send-" + round
	var stops []func()
	s := &sender{handled: new(atomic.Int64), close: func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}}
	start := func(id string, nonCandidate bool) (*masterelection.MasterElection, *redis.Client, error) {
		c, err := connectRedis(ctx, addr, nil)
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, func() { _ = c.Close() })
		cfg := masterelection.DefaultConfig()
		cfg.LockName, cfg.NodeID, cfg.NonCandidate = lock, id, nonCandidate
		m, err := masterelection.New(c, cfg)
		if err == nil {
			err = m.Start(ctx)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("herd %s: %w", id, err)
		}
		stops = append(stops, func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = m.Stop(sctx)
		})
		return m, c, nil
	}
	master, mc, err := start("master", false)
	if err != nil {
		s.close()
		return nil, err
	}
	if !master.IsMaster() {
		s.close()
		return nil, fmt.Errorf("herd: Start on the fresh lock %q returned as slave", lock)
	}
	var consumers []*durable.Consumer
	ids := make([]string, plan.workers)
	for i := range ids {
		ids[i] = fmt.Sprintf("worker-%d", i)
		e, c, err := start(ids[i], true)
		if err != nil {
			s.close()
			return nil, err
		}
		con, err := durable.NewConsumer(c, ids[i], durable.Config{LockName: lock, Terms: e, Holds: e.HoldsNodeID})
		if err != nil {
			s.close()
			return nil, err
		}
		con.HandleDefault(func(context.Context, durable.Delivery) error { s.handled.Add(1); return nil })
		if err := con.Start(ctx); err != nil {
			s.close()
			return nil, err
		}
		stops = append(stops, func() { _ = con.Close() })
		consumers = append(consumers, con)
	}
	router, err := durable.NewRouter(mc, master, nil, durable.Config{LockName: lock})
	if err != nil {
		s.close()
		return nil, err
	}
	s.admin = mc
	s.send = func(ctx context.Context, i int) error {
		_, err := router.Send(ctx, ids[i%len(ids)], "job", job{N: i, Kind: "resize"})
		return err
	}
	s.quiet = func() {
		for _, con := range consumers {
			_ = con.Close()
		}
	}
	return s, nil
}

// asynqSender sets up asynq's Client and a Server with plan.workers of
// Concurrency whose handler does nothing.
func asynqSender(ctx context.Context, addr string, plan sendPlan) (*sender, error) {
	opt := asynq.RedisClientOpt{Addr: addr}
	client := asynq.NewClient(opt)
	s := &sender{handled: new(atomic.Int64)}
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: plan.workers, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("job", func(context.Context, *asynq.Task) error { s.handled.Add(1); return nil })
	if err := srv.Start(mux); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("asynq server: %w", err)
	}
	admin, err := connectRedis(ctx, addr, nil)
	if err != nil {
		srv.Shutdown()
		_ = client.Close()
		return nil, err
	}
	s.admin = admin
	s.close = func() {
		srv.Shutdown()
		_ = client.Close()
		_ = admin.Close()
	}
	s.send = func(ctx context.Context, i int) error {
		b, err := json.Marshal(job{N: i, Kind: "resize"})
		if err != nil {
			return err
		}
		_, err = client.EnqueueContext(ctx, asynq.NewTask("job", b))
		return err
	}
	return s, nil
}

// herdSends runs one round of durable sends on a lock of its own, then
// the same number of sends with the Consumers closed (alone).
func herdSends(ctx context.Context, addr string, plan sendPlan, round int) (r, alone sendRound, err error) {
	s, err := herdSender(ctx, addr, plan, fmt.Sprint(round))
	if err != nil {
		return sendRound{}, sendRound{}, err
	}
	defer s.close()
	r, err = timeSends(ctx, s.admin, plan.messages, s.send, s.handled)
	if err != nil {
		return r, sendRound{}, err
	}
	// The same sends with no Consumer reading: as asynq's enqueues run while
	// its workers wait for their next look (5b), and Redis runs the script
	// without the readers' commands between.
	s.quiet()
	alone, err = timeCalls(ctx, s.admin, warmUp+plan.messages, plan.messages, s.send)
	return r, alone, err
}

// asynqSends runs one round of asynq enqueues.
func asynqSends(ctx context.Context, addr string, plan sendPlan) (sendRound, error) {
	s, err := asynqSender(ctx, addr, plan)
	if err != nil {
		return sendRound{}, err
	}
	defer s.close()
	return timeSends(ctx, s.admin, plan.messages, s.send, s.handled)
}

// turnBlock is how many calls each side makes in a row when the two take
// turns within a round (interleavedSends).
const turnBlock = 100

// turnCalls is what one round of interleavedSends timed: herd's sends and
// asynq's enqueues taking turns, first with herd's slaves reading, then
// with its Consumers closed.
type turnCalls struct {
	herd, queue, herdAlone, queueAlone []time.Duration
}

// interleavedSends sets up herd's sends (slaves reading) and asynq's
// enqueues (its workers running) side by side, warms both up, then times
// plan.messages calls of each in blocks of turnBlock, taking turns: what
// slows the machine for a while (its load, the host's scheduling of this
// VM's cores) falls on both alike, which rounds run one after the other do
// not promise. It then closes herd's Consumers and does it again.
func interleavedSends(ctx context.Context, addr string, plan sendPlan, round int) (t turnCalls, err error) {
	h, err := herdSender(ctx, addr, plan, fmt.Sprintf("turns-%d", round))
	if err != nil {
		return t, err
	}
	defer h.close()
	q, err := asynqSender(ctx, addr, plan)
	if err != nil {
		return t, err
	}
	defer q.close()
	for _, s := range []*sender{h, q} {
		for i := range warmUp {
			if err := s.send(ctx, i); err != nil {
				return t, fmt.Errorf("warm-up send %d: %w", i, err)
			}
		}
		if err := waitCount(ctx, s.handled, warmUp); err != nil {
			return t, fmt.Errorf("warm-up: %w", err)
		}
	}
	timed := func(s *sender, from, end int, out *[]time.Duration) error {
		for i := from; i < min(from+turnBlock, end); i++ {
			t := time.Now()
			if err := s.send(ctx, i); err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
			*out = append(*out, time.Since(t))
		}
		return nil
	}
	// The side that goes first alternates from pair to pair: the first
	// block of a pair runs while the other side's workers may still be
	// busy with the block before.
	turns := func(first int, herdOut, queueOut *[]time.Duration) error {
		for k, from := 0, first; from < first+plan.messages; k, from = k+1, from+turnBlock {
			one, other := func() error { return wrap("herd", timed(h, from, first+plan.messages, herdOut)) },
				func() error { return wrap("asynq", timed(q, from, first+plan.messages, queueOut)) }
			if k%2 == 1 {
				one, other = other, one
			}
			if err := one(); err != nil {
				return err
			}
			if err := other(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := turns(warmUp, &t.herd, &t.queue); err != nil {
		return t, err
	}
	for _, s := range []*sender{h, q} {
		if err := waitCount(ctx, s.handled, int64(warmUp+plan.messages)); err != nil {
			return t, err
		}
	}
	h.quiet()
	if err := turns(warmUp+plan.messages, &t.herdAlone, &t.queueAlone); err != nil {
		return t, err
	}
	return t, waitCount(ctx, q.handled, int64(warmUp+2*plan.messages))
}

// warmUp is the number of messages each round sends, and waits to be
// handled, before it measures: connections are open, scripts loaded, the
// workers busy.
const warmUp = 100

// timeSends sends warmUp messages and waits until handled counts them, then
// times n calls of send one after the other (timeCalls) and waits until
// handled counts every message.
func timeSends(ctx context.Context, admin *redis.Client, n int, send func(context.Context, int) error, handled *atomic.Int64) (sendRound, error) {
	for i := range warmUp {
		if err := send(ctx, i); err != nil {
			return sendRound{}, fmt.Errorf("warm-up send %d: %w", i, err)
		}
	}
	if err := waitCount(ctx, handled, warmUp); err != nil {
		return sendRound{}, fmt.Errorf("warm-up: %w", err)
	}
	r, err := timeCalls(ctx, admin, warmUp, n, send)
	if err != nil {
		return sendRound{}, err
	}
	if err := waitCount(ctx, handled, int64(warmUp+n)); err != nil {
		return sendRound{}, err
	}
	r.elapsed = time.Since(r.started)
	return r, nil
}

// timeCalls times n calls of send (numbered from first) one after the
// other; admin reads the server's time inside scripts around them.
func timeCalls(ctx context.Context, admin *redis.Client, first, n int, send func(context.Context, int) error) (sendRound, error) {
	before, err := insideTime(ctx, admin)
	if err != nil {
		return sendRound{}, err
	}
	r := sendRound{calls: make([]time.Duration, n), started: time.Now()}
	for i := range n {
		t := time.Now()
		if err := send(ctx, first+i); err != nil {
			return sendRound{}, fmt.Errorf("send %d: %w", i, err)
		}
		r.calls[i] = time.Since(t)
	}
	after, err := insideTime(ctx, admin)
	if err != nil {
		return sendRound{}, err
	}
	r.inside = map[string]usage{}
	for cmd, a := range after {
		r.inside[cmd] = usage{a.calls - before[cmd].calls, a.usec - before[cmd].usec}
	}
	return r, nil
}

// insideTime reads, for each of insideCommands, the calls Redis ran and
// the microseconds it spent in them.
func insideTime(ctx context.Context, c *redis.Client) (map[string]usage, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := make(map[string]usage, len(insideCommands))
	for _, cmd := range insideCommands {
		calls, usec, _ := benchkit.CommandUsec(info, cmd) // absent: none yet
		out[cmd] = usage{calls, usec}
	}
	return out, nil
}

// waitCount waits until c reaches want, for at most a minute.
func waitCount(ctx context.Context, c *atomic.Int64, want int64) error {
	deadline := time.Now().Add(time.Minute)
	for c.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d messages handled after a minute", c.Load(), want)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

// xaddCalls times n plain XADDs of an entry of a durable send's size, one
// at a time, and returns them with Redis's time per XADD.
func xaddCalls(ctx context.Context, addr string, n int) ([]time.Duration, time.Duration, error) {
	c, err := connectRedis(ctx, addr, nil)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	const stream = "herdpeers-send-xadd"
	defer c.Del(context.WithoutCancel(ctx), stream)
	value := strings.Repeat("x", 160)
	add := func() error {
		return c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"t", "1", "m", value}}).Err()
	}
	for range warmUp {
		if err := add(); err != nil {
			return nil, 0, err
		}
	}
	usec := func() (int64, int64, error) {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, 0, err
		}
		calls, us, _ := benchkit.CommandUsec(info, "xadd")
		return calls, us, nil
	}
	c0, u0, err := usec()
	if err != nil {
		return nil, 0, err
	}
	calls := make([]time.Duration, n)
	for i := range calls {
		t := time.Now()
		if err := add(); err != nil {
			return nil, 0, err
		}
		calls[i] = time.Since(t)
	}
	c1, u1, err := usec()
	if err != nil || c1 <= c0 {
		return calls, 0, err
	}
	return calls, time.Duration(u1-u0) * time.Microsecond / time.Duration(c1-c0), nil
}
