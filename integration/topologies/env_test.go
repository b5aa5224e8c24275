//go:build topologies

package topologies

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/overlap"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// dialFunc is the Dialer of go-redis options.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// deployment is a Redis deployment herd runs on in a test.
type deployment struct {
	name    string // "standalone", "cluster" or "sentinel"
	cluster bool   // keys and channels carry the {lockName} hash tag
	// newClient returns a new client of the deployment, closed at cleanup.
	newClient func(t *testing.T, o clientOpts) redis.UniversalClient
	// dataNodes are the Redis servers holding data (not the sentinels).
	dataNodes []*redistest.Instance
	// sentinels are the addresses of the sentinels, if any.
	sentinels []string
}

// clientOpts are what a test changes in a deployment's client options.
type clientOpts struct {
	dial           dialFunc // nil: go-redis's dialer
	user, password string   // "": the default user
	// sentinelUser and sentinelPassword log in to the sentinels.
	sentinelUser, sentinelPassword string
}

func onStandalone(inst *redistest.Instance) deployment {
	return deployment{name: "standalone", dataNodes: []*redistest.Instance{inst},
		newClient: func(t *testing.T, co clientOpts) redis.UniversalClient {
			o := inst.Options()
			o.Dialer, o.Username, o.Password = co.dial, co.user, co.password
			c := redis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			return c
		}}
}

func onCluster(c *redistest.Cluster) deployment {
	var nodes []*redistest.Instance
	nodes = append(nodes, c.Masters...)
	for _, rs := range c.Replicas {
		nodes = append(nodes, rs...)
	}
	return deployment{name: "cluster", cluster: true, dataNodes: nodes,
		newClient: func(t *testing.T, co clientOpts) redis.UniversalClient {
			o := c.Options()
			o.Dialer, o.Username, o.Password = co.dial, co.user, co.password
			cc := redis.NewClusterClient(o)
			t.Cleanup(func() { _ = cc.Close() })
			return cc
		}}
}

func onSentinel(d *redistest.Sentinel) deployment {
	return deployment{name: "sentinel", dataNodes: d.Data, sentinels: d.Addrs(),
		newClient: func(t *testing.T, co clientOpts) redis.UniversalClient {
			o := d.FailoverOptions()
			o.Dialer, o.Username, o.Password = co.dial, co.user, co.password
			o.SentinelUsername, o.SentinelPassword = co.sentinelUser, co.sentinelPassword
			c := redis.NewFailoverClient(o)
			t.Cleanup(func() { _ = c.Close() })
			return c
		}}
}

// fastConfig has timings short enough for several failovers per test.
func fastConfig(lock, id string) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = lock
	cfg.NodeID = id
	cfg.LockTTL = time.Second
	cfg.HeartbeatInterval = 250 * time.Millisecond
	cfg.CheckInterval = 200 * time.Millisecond
	cfg.ElectionJitter = 50 * time.Millisecond
	cfg.ProcessTTL = 3 * time.Second
	cfg.SlaveTimeout = 2 * time.Second
	return cfg
}

// cutter is a dialer whose connections can all be severed at once, after
// which it refuses to dial: the process using it can no longer reach Redis,
// as if it had crashed, while the test still watches it.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

var errCut = errors.New("topologies: connection cut by the test")

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errCut
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.conns = append(c.conns, conn)
	return conn, nil
}

// Cut closes every connection dialled so far and refuses new ones.
func (c *cutter) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// errLog collects the errors a component reports.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// proc is one herd process: its own client (and dialer), its election, and
// the Subscriber of its slave channel.
type proc struct {
	id     string
	cut    *cutter
	client redis.UniversalClient
	el     *masterelection.MasterElection
	sub    *pubsub.Subscriber
	got    chan pubsub.Message
	subErr *errLog // the Subscriber's OnError
}

// pubsubConfig is the routing configuration matching the election's.
func pubsubConfig(dep deployment, lock string) pubsub.Config {
	cfg := pubsub.DefaultConfig()
	cfg.LockName = lock
	cfg.Cluster = dep.cluster
	cfg.PingInterval = time.Second // notice a dead connection fast after a failover
	return cfg
}

// startProcs starts n herd processes on dep, each with its own client, named
// <lock>-0 ... <lock>-n-1, concurrently, and waits until every Start returned.
func startProcs(t *testing.T, dep deployment, lock string, n int, tune func(*masterelection.Config)) []*proc {
	t.Helper()
	return startProcsAs(t, dep, lock, n, tune, clientOpts{})
}

// startProcsAs is startProcs with every client logged in as the users of co
// (co.dial is ignored: each process gets a cutter).
func startProcsAs(t *testing.T, dep deployment, lock string, n int, tune func(*masterelection.Config), co clientOpts) []*proc {
	t.Helper()
	procs := make([]*proc, n)
	for i := range procs {
		p := &proc{id: fmt.Sprintf("%s-%d", lock, i), cut: &cutter{}, got: make(chan pubsub.Message, 1000), subErr: &errLog{}}
		co.dial = p.cut.dial
		p.client = dep.newClient(t, co)
		cfg := fastConfig(lock, p.id)
		if tune != nil {
			tune(&cfg)
		}
		el, err := masterelection.New(p.client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.el = el
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = el.Stop(ctx)
		})
		pcfg := pubsubConfig(dep, lock)
		pcfg.Terms = el
		pcfg.OnError = p.subErr.add
		sub, err := pubsub.NewSubscriber(p.client, p.id, pcfg)
		if err != nil {
			t.Fatal(err)
		}
		sub.HandleDefault(pubsub.Chan(p.got))
		p.sub = sub
		t.Cleanup(func() { _ = sub.Close() })
		procs[i] = p
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for _, p := range procs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := p.el.Start(ctx); err != nil {
				errs <- fmt.Errorf("start election %s: %w", p.id, err)
			}
			if err := p.sub.Start(ctx); err != nil {
				errs <- fmt.Errorf("start subscriber %s: %w", p.id, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return procs
}

func elections(procs []*proc) []*masterelection.MasterElection {
	out := make([]*masterelection.MasterElection, len(procs))
	for i, p := range procs {
		out[i] = p.el
	}
	return out
}

// mastersNow returns the processes that call themselves master now.
func mastersNow(procs []*proc) []*proc {
	var out []*proc
	for _, p := range procs {
		if p.el.IsMaster() {
			out = append(out, p)
		}
	}
	return out
}

// waitOneMaster waits until exactly one of procs calls itself master with a
// term above minTerm, and Redis, asked through every other live process,
// names the same node and term. It returns that process.
func waitOneMaster(t *testing.T, procs []*proc, minTerm int64, within time.Duration) *proc {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		if m := mastersNow(procs); len(m) == 1 && m[0].el.Term() > minTerm {
			last = agree(procs, m[0])
			if last == "" {
				return m[0]
			}
		} else {
			last = fmt.Sprintf("%d processes call themselves master", len(m))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single master with a term above %d within %v: %s", minTerm, within, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// agree returns "" when every process whose client is not cut sees master
// in Redis under its current term, or what disagrees.
func agree(procs []*proc, master *proc) string {
	term := master.el.Term()
	for _, p := range procs {
		if p.cut.isCut() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		id, got, err := p.el.Master(ctx)
		cancel()
		if err != nil || id != master.id || got != term {
			return fmt.Sprintf("%s sees master %q term %d (%v); want %s term %d", p.id, id, got, err, master.id, term)
		}
	}
	return ""
}

func (c *cutter) isCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// waitRegistry waits until the registry, read through master, lists exactly
// want, with master as the master and the others as slaves.
func waitRegistry(t *testing.T, master *proc, want []*proc, within time.Duration) {
	t.Helper()
	var wantDesc []string
	for _, p := range want {
		role := registry.RoleSlave
		if p == master {
			role = registry.RoleMaster
		}
		wantDesc = append(wantDesc, p.id+"="+string(role))
	}
	sort.Strings(wantDesc)
	deadline := time.Now().Add(within)
	var got []string
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var ps []registry.ProcessInfo
		ps, err = master.el.Processes(ctx)
		cancel()
		got = got[:0]
		for _, p := range ps {
			got = append(got, p.ProcessID+"="+string(p.Role))
		}
		sort.Strings(got)
		if err == nil && strings.Join(got, ",") == strings.Join(wantDesc, ",") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry lists %v (%v) after %v, want %v", got, err, within, wantDesc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkRouting sends from master to every other live process through a
// Router (one Send each, then one Broadcast), and reports from each of them
// to the master's Reports; every message must arrive, stamped with the
// master's term. After a failover (afterFailover), the Subscribers may still
// be resubscribing, and pub/sub drops what is published meanwhile: each
// first Send is then repeated until one arrives, and the connection errors
// the Subscribers reported are expected.
func checkRouting(t *testing.T, dep deployment, lock string, master *proc, slaves []*proc, afterFailover bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := pubsubConfig(dep, lock)
	router, err := pubsub.NewRouter(master.client, master.el, master.el.Registry(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	term := master.el.Term()
	for _, s := range slaves {
		drain(s.got)
		wait := 5 * time.Second
		if afterFailover {
			wait = 500 * time.Millisecond
		}
		for {
			err := router.Send(ctx, s.id, "assign", s.id)
			switch {
			case err == nil:
			case afterFailover && errors.Is(err, pubsub.ErrNoSubscriber):
				// Not subscribed again yet; the loop sends again.
			default:
				countError(t, dep, "Send to "+s.id, err)
			}
			m, ok := receiveWithin(s, wait)
			if ok {
				if m.Type != "assign" || m.From != master.id || m.Term != term {
					t.Errorf("%s received %+v, want type assign from %s with term %d", s.id, m, master.id, term)
				}
				break
			}
			if !afterFailover || ctx.Err() != nil {
				t.Fatalf("%s received nothing within %v", s.id, wait)
			}
		}
		if afterFailover {
			time.Sleep(wait) // let a repeated Send arrive, then forget it
			drain(s.got)
		}
	}
	delivered, err := router.Broadcast(ctx, "reload", "v2")
	if afterFailover && dep.cluster && errors.Is(err, pubsub.ErrNoSubscriber) && !errors.Is(err, pubsub.ErrNotMaster) {
		// Right after a Cluster failover a subscriber may still be
		// subscribed through a node that no longer serves the slot: the
		// message reaches it (checked below) but is not counted there.
		t.Logf("after the failover, Broadcast counted %d of %d: %v", delivered, len(slaves), err)
	} else if err != nil || delivered != len(slaves) {
		countError(t, dep, fmt.Sprintf("Broadcast delivered %d of %d", delivered, len(slaves)), err)
	}
	for _, s := range slaves {
		if m := receive(t, s); m.Type != "reload" || m.Term != term {
			t.Errorf("%s received %+v, want the broadcast with term %d", s.id, m, term)
		}
	}

	rcfg := cfg
	repErr := &errLog{}
	rcfg.OnError = repErr.add
	rep, err := pubsub.NewReports(master.client, master.el, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan pubsub.Message, len(slaves))
	rep.HandleDefault(pubsub.Chan(reports))
	if err := rep.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	for _, s := range slaves {
		if err := s.sub.ReportToMaster(ctx, "status", "ok"); err != nil {
			countError(t, dep, "ReportToMaster from "+s.id, err)
		}
	}
	from := map[string]bool{}
	for range slaves {
		select {
		case m := <-reports:
			from[m.From] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("the master's Reports got reports from %v only", from)
		}
	}
	if errs := repErr.all(); len(errs) > 0 {
		t.Errorf("Reports errors: %v", errs)
	}
	for _, s := range slaves {
		for _, err := range s.subErr.all() {
			if !afterFailover || !errors.Is(err, pubsub.ErrConnection) {
				t.Errorf("subscriber %s: %v", s.id, err)
			}
		}
	}
}

// countError fails the test on err. On Redis Cluster, PUBLISH counts only
// the subscribers of the node that ran it; pubsub publishes on the node of
// the election's slot and its subscribers listen there, so a count of 0
// (ErrNoSubscriber) would be a defect here too (TestClusterPublishCounts
// shows why the node matters).
func countError(t *testing.T, dep deployment, what string, err error) {
	t.Helper()
	t.Errorf("%s: %v", what, err)
}

func drain(ch chan pubsub.Message) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func receive(t *testing.T, p *proc) pubsub.Message {
	t.Helper()
	m, ok := receiveWithin(p, 5*time.Second)
	if !ok {
		t.Fatalf("%s received nothing within 5s", p.id)
	}
	return m
}

func receiveWithin(p *proc, d time.Duration) (pubsub.Message, bool) {
	select {
	case m := <-p.got:
		return m, true
	case <-time.After(d):
		return pubsub.Message{}, false
	}
}

func others(procs []*proc, not ...*proc) []*proc {
	var out []*proc
outer:
	for _, p := range procs {
		for _, n := range not {
			if p == n {
				continue outer
			}
		}
		out = append(out, p)
	}
	return out
}

// watchOverlaps starts an overlap watch over the processes' elections.
func watchOverlaps(procs []*proc) *overlap.Watch { return overlap.Start(elections(procs)) }

func stopProc(t *testing.T, p *proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.el.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", p.id, err)
	}
	_ = p.sub.Close()
}
