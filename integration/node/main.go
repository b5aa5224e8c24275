// Command node runs one herd process for the fault-injection suite
// (integration/internal/faults): an election on the Redis at -redis, with the timings
// given by flags, a subscriber for routed messages, and, while master, a
// stream of messages to every slave. It writes every fact the checkers need
// as JSON lines (faults.Record) on stdout, each stamped with the system-wide
// CLOCK_MONOTONIC, and stops gracefully on SIGTERM or SIGINT.
//
// What counts as "this process believed it was master" is what it acted on:
// the node acts as master only right after a call to Term that returned a
// term, and it times each such call with a clock reading just before and
// just after. A poller does this every -poll; the sender does it before each
// message. A call whose two readings are further apart than -max-bracket
// (the process was stopped or starved in between) is not acted on, since its
// instant is uncertain. See docs/testing.md for why this measures the
// property exactly.
//
// The ctxs the election hands out for a mastership (the one given to
// OnMasterAcquired, and the fn ctx of RunIfMaster, which the node keeps
// calling) are judged the same way: the poller reads each of them in every
// observation, right after Term and inside the same two clock readings, and
// records when each was first seen live and first seen done.
//
// The node reads commands on its standard input, one a line: "transfer
// <node id>" calls Transfer with that successor ("transfer" alone: a plain
// step-down), recorded as faults.KindTransfer when asked and when it
// returns; with -durable, "burst <n>" makes the master send n durable
// messages, spread over its slaves, as fast as it can (a few senders at
// once; faults.KindBurst when it begins and ends), and "durable-quiet"
// stops every durable send of the node for good (faults.KindDurableQuiet
// once the sends under way have returned), so that the harness can drain
// the inboxes before its final accounting. A routed message whose ID starts with faults.ForgedIDPrefix was
// published by the suite's forger: handed to the handler it is recorded as
// faults.KindForgedAccepted, not as a delivery, and rejected as stale its
// record says "forged".
//
// With -durable the node also routes through package durable: the master
// adds one message per slave per -send tick to the slave's inbox
// (faults.KindDurableStored when Send returns nil) and keeps the inboxes
// swept (Router.Maintain: the predecessors' entries adopted, a removed
// slave's inbox moved to the others); every node consumes its own inbox
// (faults.KindDurableHandled, faults.KindDurableRejected).
//
// With -assign N the node also spreads N items with package assign: every
// node writes the item set, plans while master (Planner), and works the
// items it owns (Worker), each OnAssigned ctx probed as the mastership's
// are (faults.KindItemLive, faults.KindItemDone).
//
// A node started under the node id of another live process (a twin: the
// suite's FaultTwin) has its Start refused with
// masterelection.ErrDuplicateNodeID: it records faults.KindTwinRefused and
// exits. A node that steps aside after Start returned, because another
// process took its node id while it was silent, records
// faults.KindSteppedAside and stops gracefully.
//
// -unsafe-ctx-delay (or HERD_NODE_UNSAFE_CTX_DELAY) is for the suite's own
// tests only: it makes the node read, instead of each ctx, a copy that ends
// that much after it, so that the checkers can be shown to catch a ctx that
// outlives its mastership by a few milliseconds.
//
//	node -redis 127.0.0.1:6379 -id n1 -proc n1 -ttl 1s -heartbeat 250ms -check 200ms
package main

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/integration/internal/faults"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

// msgType is the type of the messages the master sends.
const msgType = "work"

// options are the node's flags.
type options struct {
	redis        string
	lock         string
	id           string
	proc         string
	ttl          time.Duration
	heartbeat    time.Duration
	check        time.Duration
	jitter       time.Duration
	margin       time.Duration
	processTTL   time.Duration
	slaveTimeout time.Duration
	poll         time.Duration
	maxBracket   time.Duration
	send         time.Duration
	publishDelay time.Duration
	rawEvery     int
	ping         time.Duration
	candidate    bool
	priority     int
	durable      bool
	assign       int
	// unsafeCtxDelay makes the probed ctxs end this much late (tests of the
	// suite only).
	unsafeCtxDelay time.Duration
}

// unsafeCtxEnv is the environment variable that sets -unsafe-ctx-delay's
// default.
const unsafeCtxEnv = "HERD_NODE_UNSAFE_CTX_DELAY"

func parseFlags(args []string, errOut io.Writer) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&o.redis, "redis", "", "Redis address host:port (required)")
	fs.StringVar(&o.lock, "lock", "faults", "election lock name")
	fs.StringVar(&o.id, "id", "", "election node id (required)")
	fs.StringVar(&o.proc, "proc", "", "process label written on every record (default: the node id)")
	fs.DurationVar(&o.ttl, "ttl", time.Second, "LockTTL")
	fs.DurationVar(&o.heartbeat, "heartbeat", 250*time.Millisecond, "HeartbeatInterval")
	fs.DurationVar(&o.check, "check", 200*time.Millisecond, "CheckInterval")
	fs.DurationVar(&o.jitter, "jitter", 50*time.Millisecond, "ElectionJitter")
	fs.DurationVar(&o.margin, "margin", 0, "StepDownMargin (0: LockTTL/10)")
	fs.DurationVar(&o.processTTL, "process-ttl", 2*time.Second, "ProcessTTL of the registry entry")
	fs.DurationVar(&o.slaveTimeout, "slave-timeout", time.Second, "SlaveTimeout")
	fs.DurationVar(&o.poll, "poll", 200*time.Microsecond, "interval between two observations of Term")
	fs.DurationVar(&o.maxBracket, "max-bracket", time.Millisecond, "an observation whose clock readings are further apart is not acted on")
	fs.DurationVar(&o.send, "send", 20*time.Millisecond, "interval between two messages from the master to each slave (0: none)")
	fs.DurationVar(&o.publishDelay, "publish-delay", 0, "work done between deciding to send and the PUBLISH leaving the process")
	fs.IntVar(&o.rawEvery, "raw-every", 2, "send every n-th message with a plain PUBLISH, fenced by the receivers only (0: never)")
	fs.DurationVar(&o.ping, "ping", 500*time.Millisecond, "PingInterval of the subscriber")
	fs.BoolVar(&o.candidate, "candidate", true, "contend for mastership")
	fs.IntVar(&o.priority, "priority", 0, "Priority: a master of lower priority hands over to this node once it is ready for HandBackWindow (its default)")
	fs.BoolVar(&o.durable, "durable", false, "also route through package durable: per-slave inboxes, reassigned when a slave is removed")
	fs.IntVar(&o.assign, "assign", 0, "also spread this many items with package assign (a Planner and a Worker), probing each item's OnAssigned ctx (0: none)")
	var unsafeDefault time.Duration
	if v := os.Getenv(unsafeCtxEnv); v != "" {
		var err error
		if unsafeDefault, err = time.ParseDuration(v); err != nil {
			return o, fmt.Errorf("node: %s=%q: %w", unsafeCtxEnv, v, err)
		}
	}
	fs.DurationVar(&o.unsafeCtxDelay, "unsafe-ctx-delay", unsafeDefault,
		"TESTS OF THE SUITE ONLY: probe copies of the mastership ctxs that end this much after them (default $"+unsafeCtxEnv+")")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.redis == "":
		return o, errors.New("node: -redis is required")
	case o.id == "":
		return o, errors.New("node: -id is required")
	case o.unsafeCtxDelay < 0:
		return o, fmt.Errorf("node: -unsafe-ctx-delay %v is negative", o.unsafeCtxDelay)
	case fs.NArg() > 0:
		return o, fmt.Errorf("node: unexpected arguments %q", fs.Args())
	}
	if o.proc == "" {
		o.proc = o.id
	}
	return o, nil
}

// handedBackTo returns the node a step-down handed back to: the detail of
// a hand-back is "transferred to <id>: handed back (...)".
func handedBackTo(s masterelection.StepDown) (string, bool) {
	rest, ok := strings.CutPrefix(s.Detail, "transferred to ")
	if s.Reason != masterelection.StepDownTransferred || !ok {
		return "", false
	}
	to, why, ok := strings.Cut(rest, ": ")
	return to, ok && strings.HasPrefix(why, "handed back")
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	out := &recorder{w: os.Stdout, proc: o.proc, node: o.id}
	if err := run(ctx, o, out); err != nil {
		out.write(faults.Record{Kind: faults.KindExit, Detail: "error: " + err.Error()})
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
	out.write(faults.Record{Kind: faults.KindExit, Detail: "ok"})
}

// recorder writes records as JSON lines, one write each, so a line is never
// interleaved with another and a killed process loses at most the line
// being written.
type recorder struct {
	mu   sync.Mutex
	w    io.Writer
	proc string
	node string
}

func (r *recorder) write(rec faults.Record) {
	if rec.T == 0 {
		rec.T = faults.Now()
	}
	rec.Proc, rec.Node = r.proc, r.node
	b, err := json.Marshal(rec)
	if err != nil {
		b, _ = json.Marshal(faults.Record{T: rec.T, Proc: r.proc, Node: r.node, Kind: faults.KindError, Detail: "encode record: " + err.Error()})
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(b)
}

func (r *recorder) error(what string, err error) {
	r.write(faults.Record{Kind: faults.KindError, Detail: what + ": " + err.Error()})
}

// run is the node: election, subscriber, poller and sender until ctx ends,
// then a graceful stop.
func run(ctx context.Context, o options, out *recorder) error {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = o.lock
	cfg.NodeID = o.id
	cfg.Identifier = o.proc
	cfg.LockTTL = o.ttl
	cfg.HeartbeatInterval = o.heartbeat
	cfg.CheckInterval = o.check
	cfg.ElectionJitter = o.jitter
	cfg.StepDownMargin = o.margin
	cfg.ProcessTTL = o.processTTL
	cfg.SlaveTimeout = o.slaveTimeout
	cfg.NonCandidate = !o.candidate
	cfg.Priority = o.priority
	margin := o.margin
	if margin == 0 {
		margin = o.ttl / 10
	}

	client := redis.NewClient(&redis.Options{
		Addr:                  o.redis,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	defer client.Close()
	client.AddHook(&hook{out: out, publishDelay: o.publishDelay})

	detail := fmt.Sprintf("ttl=%v heartbeat=%v check=%v jitter=%v margin=%v candidate=%v priority=%d", o.ttl, o.heartbeat, o.check, o.jitter, margin, o.candidate, o.priority)
	if o.unsafeCtxDelay > 0 {
		detail += fmt.Sprintf(" UNSAFE: probed ctxs end %v late", o.unsafeCtxDelay)
	}
	out.write(faults.Record{Kind: faults.KindStart, Pid: os.Getpid(), LockTTL: int64(o.ttl), Margin: int64(margin), Detail: detail})

	m, err := masterelection.New(client, cfg)
	if err != nil {
		return err
	}
	// A node that steps aside for a twin stops, as a program should: its
	// election has stopped, and the harness starts its slot's next process.
	ctx, leave := context.WithCancel(ctx)
	defer leave()
	er := &eventRecorder{out: out, m: m, aside: leave}
	m.OnEvent(er.record)
	// A hand-back (a Transfer to a process of higher priority) is recorded
	// so that the checkers tell it from a mastership ended by a fault.
	m.Observe(masterelection.Observer{SteppedDown: func(s masterelection.StepDown) {
		if to, ok := handedBackTo(s); ok {
			out.write(faults.Record{Kind: faults.KindHandBack, Term: s.Term, Peer: to, Detail: s.Detail})
		}
	}})
	probe := &ctxProbe{delay: o.unsafeCtxDelay}
	// The handler keeps the mastership's ctx under probe until it is done;
	// Stop waits for it before the release, as for any master's work.
	m.OnMasterAcquired(func(ctx context.Context, term int64) {
		probe.track(faults.CtxMasterAcquired, term, ctx)
		<-ctx.Done()
	})

	sub, err := pubsub.NewSubscriber(client, o.id, pubsub.Config{
		LockName:     o.lock,
		PingInterval: o.ping,
		Terms:        m,
		Holds:        m.HoldsNodeID,
		OnError: func(err error) {
			var stale *pubsub.StaleTermError
			if errors.As(err, &stale) {
				r := faults.Record{Kind: faults.KindRejected, Peer: stale.From, Term: stale.Term, Highest: stale.Highest}
				if strings.HasPrefix(stale.ID, faults.ForgedIDPrefix) {
					r.Detail = "forged"
				}
				out.write(r)
				return
			}
			out.error("subscriber", err)
		},
	})
	if err != nil {
		return err
	}
	if err := sub.Handle(msgType, func(_ context.Context, msg pubsub.Message) error {
		var p payload
		if err := msg.Decode(&p); err != nil {
			return err
		}
		kind := faults.KindAccepted
		if strings.HasPrefix(msg.ID, faults.ForgedIDPrefix) {
			kind = faults.KindForgedAccepted
		}
		out.write(faults.Record{Kind: kind, Peer: msg.From, Term: msg.Term, Seq: p.Seq, Highest: sub.HighestTerm()})
		return nil
	}); err != nil {
		return err
	}
	router, err := pubsub.NewRouter(client, m, nil, pubsub.Config{LockName: o.lock})
	if err != nil {
		return err
	}
	var dr *durable.Router
	if o.durable {
		var con *durable.Consumer
		if dr, con, err = startDurable(ctx, client, m, o, out); err != nil {
			return err
		}
		defer con.Close()
	}

	// The poller runs from before Start until after Stop, so it sees every
	// transition, including the release in Stop.
	pollCtx, stopPoll := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		poll(pollCtx, m, o, probe, out)
	}()
	defer func() {
		stopPoll()
		wg.Wait()
	}()

	if err := startSubscriber(ctx, sub, out); err != nil {
		return err
	}
	defer sub.Close()

	if err := m.Start(ctx); err != nil {
		if errors.Is(err, masterelection.ErrDuplicateNodeID) {
			// A twin: another live process runs under this node id.
			out.write(faults.Record{Kind: faults.KindTwinRefused, Detail: err.Error()})
			return nil
		}
		if ctx.Err() != nil {
			return nil // stopped before the first election resolved
		}
		return err
	}
	role := "slave"
	if m.IsMaster() {
		role = "master"
	}
	out.write(faults.Record{Kind: faults.KindReady, Detail: role})
	er.started.Store(true)
	er.checkAside()

	if o.assign > 0 {
		stopAssign, err := startAssign(ctx, client, m, o, probe, out)
		if err != nil {
			return err
		}
		defer stopAssign()
	}

	dc := &durableCtl{dr: dr, terms: m, o: o, out: out}
	if o.send > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sendLoop(ctx, m, client, router, dc, o, out)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		runIfMasterLoop(ctx, m, probe)
	}()
	// Not waited for: it blocks reading until the process exits.
	go commands(ctx, os.Stdin, m, dc)

	<-ctx.Done()
	out.write(faults.Record{Kind: faults.KindStopping})
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Stop(stopCtx); err != nil {
		return err
	}
	// Give the poller a moment past Stop so it records the release even if
	// it was sleeping: IsMaster is already false. An unsafe node waits out
	// its late ctxs too, so that they are seen.
	wait := 2 * o.poll
	if o.unsafeCtxDelay > 0 {
		wait += o.unsafeCtxDelay + 2*time.Millisecond
	}
	time.Sleep(wait)
	return nil
}

// commands runs the commands read from in (see the package doc) until in
// ends; each transfer and each burst runs on a goroutine of its own; Stop
// ends a transfer (Transfer returns ErrStopped) if it is still waiting.
func commands(ctx context.Context, in io.Reader, m *masterelection.MasterElection, dc *durableCtl) {
	out := dc.out
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 1 && fields[0] == "durable-quiet":
			dc.quiesce()
			continue
		case len(fields) == 2 && fields[0] == "burst":
			n, err := strconv.Atoi(fields[1])
			if err != nil || n <= 0 {
				out.write(faults.Record{Kind: faults.KindError, Detail: fmt.Sprintf("bad burst size %.80q", fields[1])})
				continue
			}
			go dc.burst(ctx, m, n)
			continue
		}
		if len(fields) == 0 || fields[0] != "transfer" || len(fields) > 2 {
			out.write(faults.Record{Kind: faults.KindError, Detail: fmt.Sprintf("unknown command %.80q", sc.Text())})
			continue
		}
		to := ""
		if len(fields) == 2 {
			to = fields[1]
		}
		if ctx.Err() != nil {
			return
		}
		go func() {
			out.write(faults.Record{Kind: faults.KindTransfer, Peer: to, Detail: "requested"})
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := m.Transfer(tctx, to)
			cancel()
			result := "returned: ok"
			if err != nil {
				result = "returned: " + err.Error()
			}
			out.write(faults.Record{Kind: faults.KindTransfer, Peer: to, Detail: result})
		}()
	}
}

// startSubscriber starts sub, retrying while Redis cannot be reached.
func startSubscriber(ctx context.Context, sub *pubsub.Subscriber, out *recorder) error {
	for {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := sub.Start(sctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		out.error("start subscriber", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// eventRecorder turns election events into records. Slave events are
// attributed to the mastership in whose master-acquired ... master-lost
// span they were delivered: OnEvent delivers events in the order they were
// emitted, so this is the mastership that emitted them, even when the
// handler runs after that mastership has ended. Detail notes "fenced" when
// Term no longer returned that term by the time the handler ran.
type eventRecorder struct {
	out  *recorder
	m    *masterelection.MasterElection
	term int64 // of the mastership in progress in event order; owned by the OnEvent goroutine

	// aside is called once the election stepped aside for a twin after
	// Start returned (before, Start's error says so: KindTwinRefused);
	// started is set once Start returned nil.
	aside     func()
	started   atomic.Bool
	asideOnce sync.Once
}

// checkAside records a step-aside for a twin once, if the election stepped
// aside after Start returned, and calls aside. The OnEvent goroutine calls
// it on an error event, and run once Start returned, so a step-aside right
// after Start is not missed.
func (er *eventRecorder) checkAside() {
	err := er.m.SteppedAside()
	if err == nil || !er.started.Load() {
		return
	}
	er.asideOnce.Do(func() {
		er.out.write(faults.Record{Kind: faults.KindSteppedAside, Detail: err.Error()})
		er.aside()
	})
}

func (er *eventRecorder) record(e masterelection.Event) {
	switch e.Kind {
	case masterelection.EventMasterAcquired:
		er.term = e.Term
	case masterelection.EventMasterLost:
		defer func() { er.term = 0 }()
	}
	switch e.Kind {
	case masterelection.EventError:
		er.out.write(faults.Record{Kind: faults.KindError, Detail: "election: " + e.Err.Error()})
		// A step-aside's error event comes after SteppedAside is set.
		er.checkAside()
	case masterelection.EventSlaveRegistered, masterelection.EventSlaveRemoved:
		r := faults.Record{Kind: faults.KindSlaveJoined, Peer: e.Slave.NodeID, Term: er.term}
		if e.Kind == masterelection.EventSlaveRemoved {
			r.Kind, r.Peer = faults.KindSlaveLeft, e.NodeID
		}
		if er.m.Term() != er.term {
			r.Detail = "fenced"
		}
		er.out.write(r)
	default:
		detail := string(e.Kind)
		if e.Kind == masterelection.EventElectionCompleted {
			detail += fmt.Sprintf(" master=%v", e.IsMaster)
		}
		er.out.write(faults.Record{Kind: faults.KindEvent, Term: e.Term, Detail: detail})
	}
}

// observation is one timed call of Term, and of Err on each probed ctx.
type observation struct {
	begin, end int64 // Now just before and just after the calls
	term       int64
}

// observe calls Term, then Err on every ctx of probed (writing whether each
// was live into live, which has their length), between two clock readings.
// Term comes first: a ctx seen live here was live after Term answered. ok is
// false when the readings are further apart than maxBracket: the process was
// stopped or descheduled during the calls, so their instant is uncertain and
// the node does not act on them.
func observe(m *masterelection.MasterElection, maxBracket time.Duration, probed []*probedCtx, live []bool) (observation, bool) {
	begin := faults.Now()
	term := m.Term()
	for i, p := range probed {
		live[i] = p.ctx.Err() == nil
	}
	end := faults.Now()
	return observation{begin: begin, end: end, term: term}, time.Duration(end-begin) <= maxBracket
}

// ctxProbe passes the ctxs handed out for masterships to the poller.
type ctxProbe struct {
	delay   time.Duration // -unsafe-ctx-delay
	mu      sync.Mutex
	serial  int64
	pending []*probedCtx
}

// probedCtx is one ctx under probe. The fields after ctx are owned by the
// poller.
type probedCtx struct {
	item   bool   // an assign item's ctx: recorded as KindItemLive and KindItemDone
	which  string // faults.CtxMasterAcquired or faults.CtxRunIfMaster; the item for an item's ctx
	term   int64
	serial int64 // per process, written as the records' Seq
	ctx    context.Context
	stop   func()
	seen   bool          // seen live at least once
	last   observation   // the last observation that saw it live
	judged chan struct{} // an item's: closed once its end is recorded (or nothing was to record)
}

// track puts ctx, handed out for mastership term, under probe.
func (p *ctxProbe) track(which string, term int64, ctx context.Context) {
	pc := &probedCtx{which: which, term: term, ctx: ctx, stop: func() {}}
	if p.delay > 0 {
		pc.ctx, pc.stop = lateView(ctx, p.delay)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serial++
	pc.serial = p.serial
	p.pending = append(p.pending, pc)
}

// kinds returns the kinds of p's records: an item's, or a mastership ctx's.
func (p *probedCtx) kinds() (live, done faults.Kind) {
	if p.item {
		return faults.KindItemLive, faults.KindItemDone
	}
	return faults.KindCtxLive, faults.KindCtxDone
}

// trackItem puts ctx, the OnAssigned ctx of an assign item, under probe.
// The channel returned closes once the poller recorded its end: the
// handler returns only then, and the Worker gives the item up only after
// its handler returned, so the record of the end precedes the next owner's
// start, as the end itself does (a kill in between leaves no gap in which
// the checker must guess).
func (p *ctxProbe) trackItem(item string, ctx context.Context) <-chan struct{} {
	pc := &probedCtx{item: true, which: item, ctx: ctx, stop: func() {}, judged: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serial++
	pc.serial = p.serial
	p.pending = append(p.pending, pc)
	return pc.judged
}

// take appends the ctxs tracked since the last call to probed.
func (p *ctxProbe) take(probed []*probedCtx) []*probedCtx {
	p.mu.Lock()
	defer p.mu.Unlock()
	probed = append(probed, p.pending...)
	p.pending = p.pending[:0]
	return probed
}

// lateView returns a copy of ctx that ends delay after ctx does, and the
// function that releases it: the deliberately unsafe view of
// -unsafe-ctx-delay.
func lateView(ctx context.Context, delay time.Duration) (context.Context, func()) {
	late, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(delay, cancel) })
	return late, func() { stop(); cancel() }
}

// judgeCtxs records what observation ob saw of each probed ctx (live[i]
// for probed[i]): the first live sighting, and the first done one, after
// which the ctx leaves the probe. It returns the ctxs still under probe.
func judgeCtxs(probed []*probedCtx, live []bool, ob observation, out *recorder) []*probedCtx {
	keep := probed[:0]
	for i, p := range probed {
		liveKind, doneKind := p.kinds()
		if live[i] {
			if !p.seen {
				out.write(faults.Record{Kind: liveKind, Term: p.term, Seq: p.serial, Detail: p.which, T: ob.begin})
			}
			p.seen, p.last = true, ob
			keep = append(keep, p)
			continue
		}
		// Done. A ctx never seen live was never acted on: nothing to judge.
		if p.seen {
			out.write(faults.Record{Kind: doneKind, Term: p.term, Seq: p.serial, Detail: p.which, T: p.last.end, Begin: p.last.begin, Seen: ob.begin})
		}
		if p.judged != nil {
			close(p.judged)
		}
		p.stop()
	}
	clear(probed[len(keep):])
	return keep
}

// poll observes Term and the probed ctxs every o.poll and records every
// change of role, the first live and first done sighting of each ctx, the
// observed term, and the gaps in which it did not run.
func poll(ctx context.Context, m *masterelection.MasterElection, o options, probe *ctxProbe, out *recorder) {
	var (
		cur      int64 // term of the mastership in progress, 0 when slave
		lastTrue observation
		prevEnd  int64
		observed int64
		probed   []*probedCtx
		live     []bool
	)
	gapLimit := max(50*time.Millisecond, 100*o.poll)
	for ctx.Err() == nil {
		probed = probe.take(probed)
		live = slices.Grow(live[:0], len(probed))[:len(probed)]
		ob, ok := observe(m, o.maxBracket, probed, live)
		if !ok {
			continue
		}
		if prevEnd != 0 && time.Duration(ob.begin-prevEnd) > gapLimit {
			out.write(faults.Record{Kind: faults.KindGap, Begin: prevEnd, T: ob.begin})
		}
		prevEnd = ob.end
		if ob.term != cur {
			if cur != 0 {
				out.write(faults.Record{Kind: faults.KindLost, Term: cur, T: lastTrue.end, Begin: lastTrue.begin, Seen: ob.begin})
			}
			if ob.term != 0 {
				out.write(faults.Record{Kind: faults.KindAcquired, Term: ob.term, T: ob.begin, Seen: ob.end})
			}
			cur = ob.term
		}
		if ob.term != 0 {
			lastTrue = ob
		}
		probed = judgeCtxs(probed, live, ob, out)
		if t := m.ObservedTerm(); t > observed {
			observed = t
			out.write(faults.Record{Kind: faults.KindObserved, Term: t})
		}
		time.Sleep(o.poll)
	}
	if cur != 0 {
		// Still master when the poller was told to stop (it is stopped
		// only after Stop, so this means Stop failed): the mastership's
		// end is not known beyond the last observation.
		out.write(faults.Record{Kind: faults.KindLost, Term: cur, T: lastTrue.end, Begin: lastTrue.begin, Detail: "poller stopped while master"})
	}
	for _, p := range probed {
		// Still live when the poller stopped (Seen 0): its end is not known
		// beyond the last observation.
		if p.seen {
			_, done := p.kinds()
			out.write(faults.Record{Kind: done, Term: p.term, Seq: p.serial, Detail: p.which, T: p.last.end, Begin: p.last.begin})
		}
		p.stop()
	}
}

// runIfMasterLoop keeps calling RunIfMaster with a fn that puts its ctx
// under probe and returns when that ctx is done, so that every mastership
// (after the first few milliseconds) has a RunIfMaster ctx to judge.
func runIfMasterLoop(ctx context.Context, m *masterelection.MasterElection, probe *ctxProbe) {
	for ctx.Err() == nil {
		_, _ = m.RunIfMaster(ctx, func(fctx context.Context, term int64) error {
			probe.track(faults.CtxRunIfMaster, term, fctx)
			<-fctx.Done()
			return nil
		})
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// payload is the body of the master's messages.
type payload struct {
	Seq int64 `json:"seq"`
}

// sendLoop sends, while master, one message to every slave every o.send;
// with dr, one durable message to every slave too.
func sendLoop(ctx context.Context, m *masterelection.MasterElection, client *redis.Client, router *pubsub.Router, dc *durableCtl, o options, out *recorder) {
	dr := dc.dr
	ticker := time.NewTicker(o.send)
	defer ticker.Stop()
	var seq int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		ob, ok := observe(m, o.maxBracket, nil, nil)
		if !ok || ob.term == 0 {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, o.ttl)
		slaves, err := m.Slaves(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				out.error("list slaves", err)
			}
			continue
		}
		// The decision to send is taken on a fresh observation, after the
		// listing (which took a round trip).
		ob, ok = observe(m, o.maxBracket, nil, nil)
		if !ok || ob.term == 0 {
			continue
		}
		seq++
		out.write(faults.Record{Kind: faults.KindSent, Term: ob.term, Seq: seq, Begin: ob.begin, T: ob.end})
		raw := o.rawEvery > 0 && seq%int64(o.rawEvery) == 0
		for _, s := range slaves {
			if s.NodeID == o.id {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, o.ttl)
			var err error
			if raw {
				err = publishRaw(sctx, client, o.id, ob.term, s.NodeID, seq)
			} else {
				err = router.Send(sctx, s.NodeID, msgType, payload{Seq: seq})
			}
			cancel()
			var gone *pubsub.NoSubscriberError
			switch {
			case err == nil, errors.As(err, &gone):
			case errors.Is(err, pubsub.ErrNotMaster):
				// Mastership ended between the observation and the send,
				// or Redis refused it (send-side fencing).
				out.write(faults.Record{Kind: faults.KindRefused, Term: ob.term, Seq: seq, Peer: s.NodeID, Detail: err.Error()})
			case ctx.Err() == nil:
				out.error("send to "+s.NodeID, err)
			}
			if dr != nil {
				dc.send(ctx, s.NodeID, ob.term, seq)
			}
		}
	}
}

// durableCtl is the node's durable sending: the ticks of sendLoop, the
// bursts asked on standard input, and the quiet that ends them both.
type durableCtl struct {
	dr    *durable.Router // nil without -durable
	terms interface{ Term() int64 }
	o     options
	out   *recorder

	// mu is held shared by every durable send for its whole call, and
	// exclusively by quiesce, so that KindDurableQuiet is written only once
	// no send is under way.
	mu     sync.RWMutex
	quiet  bool         // guarded by mu
	bursts atomic.Int64 // bursts begun, numbering their messages
}

// send adds message seq to slave's inbox and records the outcome; it
// reports whether Redis stored it. It sends nothing once the node is quiet.
func (dc *durableCtl) send(ctx context.Context, slave string, term, seq int64) bool {
	dc.mu.RLock()
	defer dc.mu.RUnlock()
	if dc.quiet || dc.dr == nil {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, dc.o.ttl)
	defer cancel()
	begin := faults.Now()
	before := dc.terms.Term()
	id, err := dc.dr.Send(sctx, slave, msgType, payload{Seq: seq})
	if after := dc.terms.Term(); err == nil && before == after && before != 0 {
		// Send stamped the mastership's term as of the call, which a send
		// decided under term (an observation of an earlier mastership,
		// delayed by a fault) may not be: the record states the term the
		// message was stored under. Terms only grow and a lost mastership
		// reads 0, so equal readings around the call are the stamp's.
		term = before
	}
	switch {
	case err == nil:
		dc.out.write(faults.Record{Kind: faults.KindDurableStored, Term: term, Seq: seq, Peer: slave, Detail: id, Begin: begin})
		return true
	case errors.Is(err, durable.ErrNotMaster), errors.Is(err, durable.ErrNotRegistered):
		dc.out.write(faults.Record{Kind: faults.KindRefused, Term: term, Seq: seq, Peer: slave, Detail: "durable: " + err.Error()})
	case ctx.Err() == nil:
		dc.out.error("durable send to "+slave, err)
	}
	return false
}

// quiesce stops every durable send of the node for good and records it
// once the sends under way have returned.
func (dc *durableCtl) quiesce() {
	dc.mu.Lock()
	dc.quiet = true
	dc.mu.Unlock()
	dc.out.write(faults.Record{Kind: faults.KindDurableQuiet})
}

// burstSenders is how many goroutines send a burst's messages at once.
const burstSenders = 4

// burst sends n durable messages, round robin over the slaves listed when
// it begins, from burstSenders goroutines at once, each message under the
// term of one observation taken before the listing's end (as sendLoop
// decides). The messages' Seq are <burst number> × 1,000,000 + 1..n.
func (dc *durableCtl) burst(ctx context.Context, m *masterelection.MasterElection, n int) {
	out := dc.out
	if dc.dr == nil {
		out.write(faults.Record{Kind: faults.KindBurst, Seq: int64(n), Detail: "not sent: the node runs without -durable"})
		return
	}
	lctx, cancel := context.WithTimeout(ctx, dc.o.ttl)
	list, err := m.Slaves(lctx)
	cancel()
	if err != nil {
		out.write(faults.Record{Kind: faults.KindBurst, Seq: int64(n), Detail: "not sent: list slaves: " + err.Error()})
		return
	}
	var slaves []string
	for _, s := range list {
		if s.NodeID != dc.o.id {
			slaves = append(slaves, s.NodeID)
		}
	}
	ob, ok := observe(m, dc.o.maxBracket, nil, nil)
	switch {
	case !ok || ob.term == 0:
		out.write(faults.Record{Kind: faults.KindBurst, Seq: int64(n), Detail: "not sent: not master"})
		return
	case len(slaves) == 0:
		out.write(faults.Record{Kind: faults.KindBurst, Seq: int64(n), Term: ob.term, Detail: "not sent: no slaves"})
		return
	}
	base := dc.bursts.Add(1) * 1_000_000
	out.write(faults.Record{Kind: faults.KindBurst, Seq: int64(n), Term: ob.term, Detail: "begun"})
	var next, stored atomic.Int64
	var wg sync.WaitGroup
	for range burstSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if dc.send(ctx, slaves[(i-1)%int64(len(slaves))], ob.term, base+i) {
					stored.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out.write(faults.Record{Kind: faults.KindBurst, Seq: int64(n), Term: ob.term, Detail: fmt.Sprintf("done: stored %d", stored.Load())})
}

// startDurable starts the node's Consumer of its inbox and, for when it is
// master, a durable Router that reassigns removed slaves' inboxes.
func startDurable(ctx context.Context, client *redis.Client, m *masterelection.MasterElection, o options, out *recorder) (*durable.Router, *durable.Consumer, error) {
	cfg := durable.Config{LockName: o.lock, Terms: m, Holds: m.HoldsNodeID, Block: 100 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
		OnStale: func(stale *pubsub.StaleTermError) {
			out.write(faults.Record{Kind: faults.KindDurableRejected, Peer: stale.From, Term: stale.Term, Highest: stale.Highest, Detail: stale.ID})
		},
		OnError: func(err error) {
			var unverified *pubsub.UnverifiedTermError
			switch {
			case errors.As(err, &unverified) && unverified.Err == nil:
				out.write(faults.Record{Kind: faults.KindDurableRejected, Peer: unverified.From, Term: unverified.Term, Seq: 1, Detail: unverified.ID})
			default:
				out.error("durable", err)
			}
		}}
	con, err := durable.NewConsumer(client, o.id, cfg)
	if err != nil {
		return nil, nil, err
	}
	con.HandleDefault(func(_ context.Context, d durable.Delivery) error {
		var p payload
		_ = d.Decode(&p)
		out.write(faults.Record{Kind: faults.KindDurableHandled, Peer: d.From, Term: d.Term, Seq: p.Seq, Detail: d.ID,
			Deliveries: d.Deliveries, Highest: con.HighestTerm()})
		return nil
	})
	for {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = con.Start(sctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		out.error("start durable consumer", err)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	rcfg := cfg
	rcfg.SweepInterval = 200 * time.Millisecond
	rcfg.OnError = func(err error) {
		if !errors.Is(err, durable.ErrNoSlaves) {
			out.error("durable sweep", err)
		}
	}
	dr, err := durable.NewRouter(client, m, nil, rcfg)
	if err != nil {
		_ = con.Close()
		return nil, nil, err
	}
	dr.Maintain(m, nil)
	return dr, con, nil
}

// publishRaw sends message seq to slave with a plain PUBLISH of the
// envelope docs/routing.md specifies, as a sender without the router's
// send-side fencing would: only the receivers' fencing stands between a
// late message and its handler.
func publishRaw(ctx context.Context, client *redis.Client, from string, term int64, slave string, seq int64) error {
	body, err := json.Marshal(payload{Seq: seq})
	if err != nil {
		return err
	}
	env, err := json.Marshal(pubsub.Message{ID: uuid.NewString(), From: from, Term: term, Type: msgType, Payload: body, SentAt: time.Now()})
	if err != nil {
		return err
	}
	return client.Publish(ctx, pubsub.SlaveChannel(slave), env).Err()
}

// hook stamps the lock calls and the PUBLISH of routed messages as they
// leave the process.
type hook struct {
	out          *recorder
	publishDelay time.Duration
}

var (
	acquireSHA         = rdb.AcquireSHA
	acquireRegisterSHA = rdb.AcquireRegisterSHA // Start's first acquire, with its registration
	takeSHA            = rdb.TakeSHA            // Start's questions with its first acquire and registration
	renewSHA           = rdb.RenewSHA
)

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch name := cmd.Name(); name {
		case "evalsha", "eval":
			if which := lockScript(name, cmd.Args()); which != "" {
				h.out.write(faults.Record{Kind: faults.KindLockCall, Detail: which})
			} else {
				h.publish(cmd.Args())
			}
		case "publish":
			h.publish(cmd.Args())
		}
		return next(ctx, cmd)
	}
}

// lockScript names the lock script an EVAL or EVALSHA runs, or "".
func lockScript(name string, args []any) string {
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	if name == "eval" {
		sum := sha1.Sum([]byte(s))
		s = hex.EncodeToString(sum[:])
	}
	switch s {
	case acquireSHA:
		return "acquire"
	case acquireRegisterSHA, takeSHA:
		return faults.AcquireRegister
	case renewSHA:
		return "renew"
	}
	return ""
}

// publish records a routed message about to leave the process, whether as
// a PUBLISH or inside a script that publishes it (the router's send-side
// fencing), once per slave channel, after the configured delay: work
// between the decision and the write, so that a process stopped during it
// publishes late, with its old term.
func (h *hook) publish(args []any) {
	var (
		msg      pubsub.Message
		found    bool
		channels []string
	)
	for _, a := range args[1:] {
		var s string
		switch v := a.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		default:
			continue
		}
		switch {
		case strings.HasPrefix(s, keyspace.DefaultSlavePrefix):
			channels = append(channels, strings.TrimPrefix(s, keyspace.DefaultSlavePrefix))
		case !found && strings.HasPrefix(s, "{"):
			if m, err := pubsub.ParseMessage([]byte(s)); err == nil {
				msg, found = m, true
			}
		}
	}
	if !found || len(channels) == 0 {
		return
	}
	var p payload
	if err := msg.Decode(&p); err != nil {
		return
	}
	if h.publishDelay > 0 {
		time.Sleep(h.publishDelay)
	}
	t := faults.Now()
	for _, ch := range channels {
		h.out.write(faults.Record{T: t, Kind: faults.KindPublish, Term: msg.Term, Seq: p.Seq, Peer: ch})
	}
}

// startAssign spreads o.assign items with package assign: every node writes
// the same item set (idempotent) at start and each time it becomes master,
// plans while master, and works the items
// it owns, each OnAssigned ctx under probe. The lease is LockTTL, renewed
// every LockTTL/5. The returned function stops the Worker and the Planner.
func startAssign(ctx context.Context, client *redis.Client, m *masterelection.MasterElection, o options, probe *ctxProbe, out *recorder) (func(), error) {
	cfg := assign.Config{LeaseTTL: o.ttl, RenewInterval: o.ttl / 5, Settle: 50 * time.Millisecond, Resync: o.ttl,
		OnError: func(err error) { out.error("assign", err) }}
	p, err := assign.NewPlanner(client, m, cfg)
	if err != nil {
		return nil, err
	}
	w, err := assign.NewWorker(client, m, cfg)
	if err != nil {
		return nil, err
	}
	_ = w.OnAssigned(func(ctx context.Context, item string) {
		judged := probe.trackItem(item, ctx)
		<-ctx.Done()
		select { // bounded: a poller that stopped holds no Stop up
		case <-judged:
		case <-time.After(time.Second):
		}
	})
	items := make([]string, o.assign)
	for i := range items {
		items[i] = fmt.Sprintf("item-%03d", i)
	}
	if err := p.SetItems(ctx, items...); err != nil {
		out.error("assign: set items", err)
	}
	// After Redis loses its data, the next master's Planner puts the items
	// back from its copy (Planner.Restores): nothing here adds them again,
	// so the ownership checker judges that recovery too.
	if err := w.Start(ctx); err != nil {
		out.error("assign: start worker", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(runCtx) }()
	return func() {
		cancel()
		<-done
		stopCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		if err := w.Stop(stopCtx); err != nil {
			out.error("assign: stop worker", err)
		}
	}, nil
}
