// Command node is one herd process, to run in several terminals against a
// real Redis and watch the election from the inside:
//
//	go run ./examples/node -redis redis://127.0.0.1:6379 -id a
//	go run ./examples/node -redis redis://127.0.0.1:6379 -id b
//	go run ./examples/node -redis redis://127.0.0.1:6379 -id c
//
// One process becomes master. Every -every it broadcasts a job to every
// slave over the slave channels (stamped with its term); each slave prints
// the job and reports "done" to the master inbox, where the master prints
// it. The master prints slaves joining and leaving.
//
// Press Ctrl+C on the master: it releases the lock and a slave takes over at
// once (graceful handover). Kill it with kill -9 instead: the others take
// over when its lock expires (-lock-ttl). Type "pause" and Enter on the
// master: it stops being a candidate and hands over, but keeps running as a
// slave; "resume" makes it a candidate again. "status" prints the role.
//
// With -metrics ADDR (say -metrics :9100) the process also serves its
// Prometheus metrics on http://ADDR/metrics, a liveness probe on /livez and
// a readiness probe on /readyz (package metrics, docs/observability.md).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/metrics"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// options are the flags.
type options struct {
	setup.Node // -redis, -id, -lock, -lock-ttl
	Every      time.Duration
	MaxSubs    int
	Workload   int
	Candidate  bool
	Metrics    string
}

func main() {
	o := options{}
	fs := o.Node.Flags("node", "herd-node-example")
	fs.DurationVar(&o.Every, "every", 2*time.Second, "how often the master broadcasts a job")
	fs.IntVar(&o.MaxSubs, "max-subscriptions", 50, "capability published in the registry")
	fs.IntVar(&o.Workload, "workload", 80, "preferred workload in percent, published in the registry")
	fs.BoolVar(&o.Candidate, "candidate", true, "contend for mastership (false: follow as a slave only)")
	fs.StringVar(&o.Metrics, "metrics", "", "serve /metrics (Prometheus), /livez and /readyz on this address, e.g. :9100; empty: off")
	setup.Main(fs, func(ctx context.Context) error { return run(ctx, o, os.Stdin, os.Stdout) })
}

// run runs the node until ctx ends (Ctrl+C), then leaves the election
// gracefully. Commands are read from in, one per line.
func run(ctx context.Context, o options, in io.Reader, out io.Writer) error {
	n, err := newNode(o, out)
	if err != nil {
		return err
	}
	return n.run(ctx, in)
}

// run is the node's life: start, serve until ctx ends, stop, close. The
// command reader it starts ends when in does (at EOF; os.Stdin ends with
// the process).
func (n *node) run(ctx context.Context, in io.Reader) error {
	defer n.close()
	if err := n.start(ctx); err != nil {
		if ctx.Err() != nil {
			// Ctrl+C while joining: Start stopped the election (a lock it
			// took is released); that is no failure.
			n.log.Printf("stopped while joining")
			return nil
		}
		return err
	}
	go n.commands(ctx, in)
	<-ctx.Done()
	n.log.Printf("stopping: leaving the election (a master releases its lock and a slave takes over at once)")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.stop(sctx)
}

// node is the process: election, subscriber, report receiver and router on
// one client.
type node struct {
	o        options
	log      *setup.Log
	client   *redis.Client
	m        *masterelection.MasterElection
	sub      *pubsub.Subscriber
	receiver *pubsub.Reports // the master's side of the slaves' reports
	router   *pubsub.Router

	reg     *prometheus.Registry // the node's metrics; nil without -metrics
	mx      *metrics.Metrics
	srv     *http.Server // serves the metrics and probes; nil without -metrics
	srvAddr net.Addr     // where srv listens, once started

	jobs    atomic.Int64 // jobs received as a slave
	reports atomic.Int64 // reports received as master
	sent    atomic.Int64 // jobs broadcast as master
}

// job is the payload of the "job" message.
type job struct {
	Seq int64 `json:"seq"`
}

// config returns the election's configuration. The timings it leaves unset
// are masterelection's defaults, which follow LockTTL in the default ratios
// (30s : 10s : 10s : 2s, slave timeout 15s, process TTL 45s).
func config(o options) masterelection.Config {
	return masterelection.Config{
		LockName:     o.Lock,
		NodeID:       o.ID,
		Identifier:   o.ID,
		NonCandidate: !o.Candidate,
		LockTTL:      o.LockTTL,
		Capabilities: registry.Capabilities{CanProcessDetections: true, MaxSubscriptions: o.MaxSubs, PreferredWorkload: o.Workload},
	}
}

func newNode(o options, out io.Writer) (*node, error) {
	if o.Every <= 0 {
		return nil, fmt.Errorf("-every %v: must be positive", o.Every)
	}
	client, err := o.Client()
	if err != nil {
		return nil, err
	}
	n := &node{o: o, log: setup.NewLog(out, o.ID), client: client}
	if n.m, err = masterelection.New(n.client, config(o)); err != nil {
		_ = n.client.Close()
		return nil, err
	}
	// The election gives the routing its names (lock, channels) and terms.
	scfg := pubsub.Config{Terms: n.m, Holds: n.m.HoldsNodeID, OnError: func(err error) { n.log.Printf("routing: %v", err) }}
	if n.sub, err = pubsub.NewSubscriber(n.client, o.ID, scfg); err != nil {
		_ = n.client.Close()
		return nil, err
	}
	rcfg := pubsub.Config{}
	rcfg.OnError = func(err error) {
		if !errors.Is(err, pubsub.ErrNotMaster) { // reports reaching a slave's Reports are expected
			n.log.Printf("reports: %v", err)
		}
	}
	if n.receiver, err = pubsub.NewReports(n.client, n.m, rcfg); err != nil {
		_ = n.client.Close()
		return nil, err
	}
	// The election is the Router's Mastership, its slave list and its names.
	if n.router, err = pubsub.NewRouter(n.client, n.m, nil, pubsub.Config{}); err != nil {
		_ = n.client.Close()
		return nil, err
	}
	if o.Metrics != "" {
		n.reg = prometheus.NewRegistry()
		if n.mx, err = metrics.Register(n.reg, n.m, metrics.WithRouter(n.router), metrics.WithSubscriber(n.sub)); err != nil {
			_ = n.client.Close()
			return nil, err
		}
	}
	_ = n.sub.Handle("job", n.onJob)
	_ = n.receiver.Handle("done", n.onReport)
	n.m.OnMasterAcquired(n.asMaster)
	n.m.OnEvent(n.onEvent)
	return n, nil
}

func (n *node) start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.sub.Start(sctx); err != nil {
		return fmt.Errorf("subscribe on %s: %w", n.o.Redis, err)
	}
	if err := n.receiver.Start(sctx); err != nil {
		return fmt.Errorf("listen on the master inbox: %w", err)
	}
	if err := n.serveMetrics(); err != nil {
		return err
	}
	n.log.Printf("joining %q on %s as pid %d (LockTTL %v)", n.o.Lock, n.o.Redis, os.Getpid(), n.o.LockTTL)
	if err := n.m.Start(sctx); err != nil {
		return err
	}
	return nil
}

func (n *node) stop(ctx context.Context) error {
	err := n.m.Stop(ctx)
	n.log.Printf("stopped")
	return err
}

func (n *node) close() {
	if n.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = n.srv.Shutdown(ctx)
		cancel()
	}
	if n.mx != nil {
		n.mx.Unregister()
	}
	_ = n.sub.Close()
	_ = n.receiver.Close()
	_ = n.client.Close()
}

// serveMetrics serves the metrics and the health probes on -metrics, from
// before the election starts: /readyz answers 503 until the first election
// has resolved.
func (n *node) serveMetrics() error {
	if n.reg == nil {
		return nil
	}
	ln, err := net.Listen("tcp", n.o.Metrics)
	if err != nil {
		return fmt.Errorf("-metrics %q: %w", n.o.Metrics, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
	mux.Handle("/livez", metrics.Liveness(n.m))
	mux.Handle("/readyz", metrics.Readiness(n.m, time.Second))
	n.srv, n.srvAddr = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln.Addr()
	go func() { _ = n.srv.Serve(ln) }()
	n.log.Printf("metrics on http://%s/metrics, probes on /livez and /readyz", ln.Addr())
	return nil
}

// onEvent prints the role changes, and the slaves joining and leaving.
func (n *node) onEvent(e masterelection.Event) {
	switch e.Kind {
	case masterelection.EventSlaveRegistered:
		n.log.Printf("slave joined: %s", e.Slave.NodeID)
	case masterelection.EventSlaveRemoved:
		n.log.Printf("slave left: %s", e.NodeID)
	default:
		n.log.Roles(e)
	}
}

// asMaster is the master's work: broadcast a job every -every until the
// mastership ends (ctx is cancelled at that moment).
func (n *node) asMaster(ctx context.Context, term int64) {
	setup.Every(ctx, n.o.Every, func() {
		seq := n.sent.Add(1)
		delivered, err := n.router.Broadcast(ctx, "job", job{Seq: seq})
		switch {
		case errors.Is(err, pubsub.ErrNotMaster):
			// The mastership just ended; ctx is about to say so.
		case err != nil:
			n.log.Printf("-> job #%d reached %s; not delivered: %v", seq, slaves(delivered), err)
		default:
			n.log.Printf("-> job #%d to %s", seq, slaves(delivered))
		}
	})
	n.log.Printf("mastership of term %d over: job broadcasts stopped", term)
}

// onJob is a slave handling a routed job: it reports back to the master.
func (n *node) onJob(ctx context.Context, msg pubsub.Message) error {
	var j job
	if err := msg.Decode(&j); err != nil {
		return err
	}
	n.jobs.Add(1)
	n.log.Printf("<- job #%d from %s (term %d)", j.Seq, msg.From, msg.Term)
	return n.sub.ReportToMaster(ctx, "done", j)
}

// onReport is the master reading a slave's report.
func (n *node) onReport(_ context.Context, msg pubsub.Message) error {
	var j job
	if err := msg.Decode(&j); err != nil {
		return err
	}
	n.reports.Add(1)
	n.log.Printf("<- done #%d from %s", j.Seq, msg.From)
	return nil
}

// commands reads pause, resume and status lines until ctx ends or in
// closes.
func (n *node) commands(ctx context.Context, in io.Reader) {
	lines := bufio.NewScanner(in)
	for lines.Scan() && ctx.Err() == nil {
		switch cmd := strings.TrimSpace(lines.Text()); cmd {
		case "pause":
			n.m.SetCandidate(false)
			n.log.Printf("paused: no longer a candidate (a master hands over)")
		case "resume":
			n.m.SetCandidate(true)
			n.log.Printf("resumed: a candidate again")
		case "status":
			n.log.Printf("master: %v, term %d, candidate: %v", n.m.IsMaster(), n.m.Term(), n.m.Candidate())
		case "":
		default:
			n.log.Printf("unknown command %q: pause, resume or status", cmd)
		}
	}
}

func slaves(n int) string {
	if n == 1 {
		return "1 slave"
	}
	return fmt.Sprintf("%d slaves", n)
}
