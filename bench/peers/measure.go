package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/herdkit/herd/internal/testkit/benchkit"
)

// settle is how long a new process is given to join before it is relied
// on; a random part of up to one Check (or Renew) is added to it, so that
// a polling loop is caught at every phase of its cycle.
const settle = 50 * time.Millisecond

// storeRoundTrips measures n round trips of each store, interleaved call by
// call so that load on the machine hits both alike: a Redis PING and an
// etcd Get (linearizable, the default) of one key, each on one connection.
func storeRoundTrips(ctx context.Context, rc *redis.Client, ec *clientv3.Client, n int) (ping, get []time.Duration, err error) {
	for range n {
		t0 := time.Now()
		if err := rc.Ping(ctx).Err(); err != nil {
			return nil, nil, fmt.Errorf("PING: %w", err)
		}
		t1 := time.Now()
		if _, err := ec.Get(ctx, "herdpeers-rt"); err != nil {
			return nil, nil, fmt.Errorf("etcd Get: %w", err)
		}
		t2 := time.Now()
		ping, get = append(ping, t1.Sub(t0)), append(get, t2.Sub(t1))
	}
	return ping, get, nil
}

// uncontestedResult is what uncontested measured of one peer.
type uncontestedResult struct {
	total, part []time.Duration
	err         error
}

// uncontested runs reps elections on fresh locks for every peer that can
// be measured so, one peer after the other within each round.
func uncontested(ctx context.Context, peers []peer, reps int) map[string]*uncontestedResult {
	out := map[string]*uncontestedResult{}
	for r := range reps {
		for _, p := range peers {
			res := out[p.name]
			if res == nil {
				res = &uncontestedResult{}
				out[p.name] = res
			}
			if p.uncontested == nil || res.err != nil {
				continue
			}
			d, part, err := p.uncontested(ctx, fmt.Sprintf("herdpeers-%s-solo-%d", p.name, r))
			if err != nil {
				res.err = fmt.Errorf("round %d: %w", r+1, err)
				continue
			}
			res.total = append(res.total, d)
			if part > 0 {
				res.part = append(res.part, part)
			}
		}
	}
	return out
}

// series is the samples of one peer in one scenario, or why it stopped.
type series struct {
	samples []time.Duration
	err     error
}

// peerRun is one peer's election in a measurement the peers take turns
// at: handovers (its leader) or crash failovers (its processes).
type peerRun struct {
	p      peer
	lock   string
	seq    int    // the number of the last process started
	res    series // the samples, or why the peer stopped
	leader node   // handovers: the process that leads
	nodes  []node // failovers: the processes
}

// newRuns returns a run of each peer, on a lock of its own named after
// what, and the runs' series by peer name.
func newRuns(peers []peer, what string) ([]*peerRun, map[string]*series) {
	runs := make([]*peerRun, 0, len(peers))
	out := map[string]*series{}
	for _, p := range peers {
		s := &peerRun{p: p, lock: "herdpeers-" + p.name + "-" + what}
		out[p.name] = &s.res
		runs = append(runs, s)
	}
	return runs, out
}

// takeTurns runs reps rounds in which each run whose series has no error
// yet plays round once, in turn; a round's error ends that run's series.
func takeTurns(runs []*peerRun, reps int, round func(s *peerRun) error) {
	for r := range reps {
		for _, s := range runs {
			if s.res.err != nil {
				continue
			}
			if err := round(s); err != nil {
				s.res.err = fmt.Errorf("round %d: %w", r+1, err)
			}
		}
	}
}

// fresh starts the run's next process.
func (s *peerRun) fresh(ctx context.Context, t timings) (node, error) {
	s.seq++
	n, err := s.p.newNode(ctx, s.lock, fmt.Sprintf("node-%d", s.seq), t)
	if err != nil {
		return nil, err
	}
	if err := n.start(ctx); err != nil {
		_ = stopWithin(ctx, n, 5*time.Second)
		return nil, fmt.Errorf("start a process: %w", err)
	}
	return n, nil
}

// handovers measures, reps times per peer, a graceful handover with
// timings t: a new process joins and settles, then the leader stops, and
// the clock runs from the call of its stop until the new process learns
// it leads. The new process leads the next round. Peers take turns,
// one handover each per round.
func handovers(ctx context.Context, peers []peer, t timings, reps int) map[string]*series {
	runs, out := newRuns(peers, "handover")
	for _, s := range runs {
		n, err := s.fresh(ctx, t)
		if err == nil {
			if err = waitAcquired(ctx, n, 5*time.Second); err != nil {
				_ = stopWithin(ctx, n, 5*time.Second)
			}
		}
		if err != nil {
			s.res.err = fmt.Errorf("first leader: %w", err)
			continue
		}
		s.leader = n
	}
	takeTurns(runs, reps, func(s *peerRun) error { return s.handover(ctx, t) })
	for _, s := range runs {
		if s.leader != nil {
			_ = stopWithin(ctx, s.leader, 5*time.Second)
		}
	}
	return out
}

// handover is one round of handovers.
func (s *peerRun) handover(ctx context.Context, t timings) error {
	w, err := s.fresh(ctx, t)
	if err != nil {
		return err
	}
	sleep(ctx, settle+rand.N(t.Check))
	if w.leader() {
		_ = stopWithin(ctx, w, 5*time.Second)
		return errors.New("the next process leads while the leader holds the lock")
	}
	t0 := time.Now()
	stopErr := stopWithin(ctx, s.leader, 5*time.Second)
	var at time.Time
	select {
	case at = <-w.acquired():
	case <-time.After(5 * time.Second):
	}
	s.leader = w
	if stopErr != nil {
		return fmt.Errorf("stop the leader: %w", stopErr)
	}
	if at.IsZero() {
		return errors.New("no handover within 5s of the leader's stop")
	}
	s.res.samples = append(s.res.samples, at.Sub(t0))
	return nil
}

// failovers measures, reps times per peer, a crash failover among
// processes processes with timings t: at a random point of the leader's
// renewal cycle its connections are closed (no release, no renewal, as if
// it had been killed) and the clock runs until another process learns it
// leads. The crashed process is replaced by a new one. Peers take turns.
func failovers(ctx context.Context, peers []peer, t timings, processes, reps int) map[string]*series {
	var cleanup sync.WaitGroup
	defer cleanup.Wait()
	runs, out := newRuns(peers, "failover")
	for _, s := range runs {
		for range processes {
			n, err := s.fresh(ctx, t)
			if err != nil {
				s.res.err = err
				break
			}
			s.nodes = append(s.nodes, n)
		}
	}
	takeTurns(runs, reps, func(s *peerRun) error { return s.failover(ctx, t, &cleanup) })
	for _, s := range runs {
		for _, n := range s.nodes {
			cleanup.Add(1)
			go func() {
				defer cleanup.Done()
				_ = stopWithin(ctx, n, 5*time.Second)
			}()
		}
	}
	return out
}

// failover is one round of failovers.
func (s *peerRun) failover(ctx context.Context, t timings, cleanup *sync.WaitGroup) error {
	sleep(ctx, settle+rand.N(t.Renew))
	var leader node
	deadline := time.Now().Add(3*t.TTL + 5*time.Second)
	for leader == nil {
		var leaders []node
		for _, n := range s.nodes {
			if n.leader() {
				leaders = append(leaders, n)
			}
		}
		switch {
		case len(leaders) == 1:
			leader = leaders[0]
		case len(leaders) > 1:
			return fmt.Errorf("%d processes lead at once", len(leaders))
		case time.Now().After(deadline):
			return errors.New("no process leads")
		default:
			sleep(ctx, time.Millisecond)
		}
	}
	var others []node
	for _, n := range s.nodes {
		if n != leader {
			for len(n.acquired()) > 0 { // forget earlier take-overs
				<-n.acquired()
			}
			others = append(others, n)
		}
	}
	t0 := time.Now()
	leader.crash()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(3*t.TTL + 5*time.Second))}}
	for _, n := range others {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.acquired())})
	}
	chosen, v, _ := reflect.Select(cases)
	cleanup.Add(1)
	go func() { // a crashed process's stop can take a while (herd's Stop bounded)
		defer cleanup.Done()
		_ = stopWithin(ctx, leader, 5*time.Second)
	}()
	s.nodes = others
	n, err := s.fresh(ctx, t)
	if err != nil {
		return err
	}
	s.nodes = append(s.nodes, n)
	if chosen == 0 {
		return fmt.Errorf("no take-over within %v of the crash", 3*t.TTL+5*time.Second)
	}
	s.res.samples = append(s.res.samples, v.Interface().(time.Time).Sub(t0))
	return nil
}

// idleResult is what idle measured of one peer.
type idleResult struct {
	perMinute float64 // round trips per process per minute
	detail    string
	err       error
}

// idle runs processes processes of each peer with timings t until each
// peer has one leader, waits two seconds and then counts, over window, the
// round trips they make, scaled to a process and a minute. servers maps a
// Redis peer's name to the server only it uses, whose INFO commandstats
// adds the subscriptions' traffic to what the peer's hook counted.
func idle(ctx context.Context, peers []peer, servers map[string]*redis.Client, t timings, processes int, window time.Duration) map[string]*idleResult {
	out := map[string]*idleResult{}
	all := map[string][]node{}
	defer func() {
		var wg sync.WaitGroup
		for _, nodes := range all {
			for _, n := range nodes {
				wg.Add(1)
				go func() { defer wg.Done(); _ = stopWithin(ctx, n, 5*time.Second) }()
			}
		}
		wg.Wait()
	}()
	for _, p := range peers {
		out[p.name] = &idleResult{}
		for i := range processes {
			n, err := p.newNode(ctx, "herdpeers-"+p.name+"-idle", fmt.Sprintf("node-%d", i), t)
			if err == nil {
				all[p.name] = append(all[p.name], n)
				err = n.start(ctx)
			}
			if err != nil {
				out[p.name].err = err
				break
			}
		}
	}
	deadline := time.Now().Add(2*t.TTL + 5*time.Second)
	for _, p := range peers {
		for out[p.name].err == nil && leaders(all[p.name]) != 1 {
			if time.Now().After(deadline) {
				out[p.name].err = fmt.Errorf("%d leaders among %d processes", leaders(all[p.name]), len(all[p.name]))
				break
			}
			sleep(ctx, 10*time.Millisecond)
		}
	}
	sleep(ctx, 2*time.Second)
	type snapshot struct {
		hook, pings int64
		server      benchkit.CommandStats
	}
	take := func() map[string]snapshot {
		snaps := map[string]snapshot{}
		for _, p := range peers {
			var s snapshot
			switch {
			case p.hook != nil:
				s.hook, s.pings = p.hook.roundTrips.Load(), p.hook.pings.Load()
				if c := servers[p.name]; c != nil {
					var err error
					if s.server, err = commandCalls(ctx, c); err != nil && out[p.name].err == nil {
						out[p.name].err = err
					}
				}
			case p.counter != nil:
				s.hook = p.counter()
			}
			snaps[p.name] = s
		}
		return snaps
	}
	before := take()
	t0 := time.Now()
	sleep(ctx, window)
	after := take()
	elapsed := time.Since(t0)
	scale := float64(time.Minute) / float64(elapsed) / float64(processes)
	for _, p := range peers {
		res := out[p.name]
		if res.err != nil {
			continue
		}
		b, a := before[p.name], after[p.name]
		sent := a.hook - b.hook
		var subs int64
		if a.server != nil {
			// The subscriptions' own commands: every PING the server saw
			// that no client's command path sent, and (un)subscriptions.
			subs = a.server["ping"] - b.server["ping"] - (a.pings - b.pings)
			for _, name := range []string{"subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe"} {
				subs += a.server[name] - b.server[name]
			}
		}
		res.perMinute = float64(sent+subs) * scale
		if p.hook != nil {
			res.detail = fmt.Sprintf("%d round trips on the clients' command paths and %d on subscriptions in %v among %d processes", sent, subs, elapsed.Round(100*time.Millisecond), processes)
		} else {
			res.detail = fmt.Sprintf("%d requests sent by the clients in %v among %d processes", sent, elapsed.Round(100*time.Millisecond), processes)
		}
	}
	return out
}

func leaders(nodes []node) int {
	n := 0
	for _, x := range nodes {
		if x.leader() {
			n++
		}
	}
	return n
}

func waitAcquired(ctx context.Context, n node, d time.Duration) error {
	select {
	case <-n.acquired():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return fmt.Errorf("not leader within %v", d)
	}
}

func stopWithin(ctx context.Context, n node, d time.Duration) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	return n.stop(sctx)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
