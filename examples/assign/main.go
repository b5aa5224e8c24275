// Command assign spreads cameras over the slaves of a herd with package
// assign, then kills a slave and restarts the master while items are
// moving, and prints what it saw: how many items changed hands, the longest
// time an item had no owner, and the overlaps (an item worked by two slaves
// at once), which must be 0.
//
//	go run ./examples/assign                                   # embedded miniredis
//	go run ./examples/assign -redis redis://127.0.0.1:6379
//
// Every node is a process of its own in a real deployment: here each has its
// own client, election, Planner and Worker in one program. A node is killed
// by closing its client: it neither renews nor gives anything up, as after
// kill -9.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

type options struct {
	Items   int
	LockTTL time.Duration
	Lease   time.Duration
}

func defaultOptions() options {
	return options{Items: 40, LockTTL: time.Second, Lease: time.Second}
}

func main() {
	o := defaultOptions()
	fs := setup.Flags("assign")
	fs.IntVar(&o.Items, "items", o.Items, "how many cameras to spread")
	fs.DurationVar(&o.LockTTL, "lock-ttl", o.LockTTL, "the election's LockTTL (other timings follow it)")
	fs.DurationVar(&o.Lease, "lease", o.Lease, "assign.Config.LeaseTTL: how long a dead slave keeps its items")
	setup.Demo(fs, "herd assign demo", func(ctx context.Context, newClient func() *redis.Client) error {
		s, err := run(ctx, newClient, o, os.Stdout)
		if err != nil {
			return err
		}
		s.print(os.Stdout)
		if s.Overlaps > 0 {
			return fmt.Errorf("%d overlaps", s.Overlaps)
		}
		return nil
	})
}

// summary is what the demo saw.
type summary struct {
	Moved      int           // ownership changes after the first plan settled
	LongestGap time.Duration // the longest time an item had no owner after that
	Overlaps   int           // spans of two slaves on one item that intersect
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "items moved                %d\n", s.Moved)
	fmt.Fprintf(w, "longest time without owner %v\n", s.LongestGap.Round(time.Millisecond))
	fmt.Fprintf(w, "overlaps                   %d\n", s.Overlaps)
}

// span is one slave's work on one item: from just before the first check
// that saw its ctx live to just after the last.
type span struct {
	node        string
	first, last time.Time
}

// book records every span of every item.
type book struct {
	mu    sync.Mutex
	spans map[string][]span
	wg    sync.WaitGroup
}

// work is a node's OnAssigned handler: it works on item until its ctx
// ends, checking the ctx every millisecond as real work checks it before
// each action.
func (b *book) work(node string) func(context.Context, string) {
	return func(ctx context.Context, item string) {
		b.wg.Add(1)
		defer b.wg.Done()
		s := span{node: node}
		for {
			before := time.Now()
			if ctx.Err() != nil {
				break
			}
			if s.first.IsZero() {
				s.first = before
			}
			s.last = time.Now()
			time.Sleep(time.Millisecond)
		}
		if !s.first.IsZero() {
			b.mu.Lock()
			b.spans[item] = append(b.spans[item], s)
			b.mu.Unlock()
		}
	}
}

// summarize judges the spans after since.
func (b *book) summarize(since time.Time) summary {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s summary
	for _, spans := range b.spans {
		sort.Slice(spans, func(i, j int) bool { return spans[i].first.Before(spans[j].first) })
		for i := range spans {
			for j := i + 1; j < len(spans); j++ {
				if spans[i].node != spans[j].node && !spans[i].last.Before(spans[j].first) {
					s.Overlaps++
				}
			}
			if i > 0 && spans[i].first.After(since) {
				if spans[i].node != spans[i-1].node {
					s.Moved++
				}
				s.LongestGap = max(s.LongestGap, spans[i].first.Sub(spans[i-1].last))
			}
		}
	}
	return s
}

// node is one herd process.
type node struct {
	id     string
	client *redis.Client
	e      *masterelection.MasterElection
	p      *assign.Planner
	w      *assign.Worker
	cancel context.CancelFunc
	done   chan struct{}
}

type herd struct {
	o         options
	newClient func() *redis.Client
	b         *book
	nodes     map[string]*node
	out       io.Writer
}

func (h *herd) start(ctx context.Context, id string) (*node, error) {
	n := &node{id: id, client: h.newClient(), done: make(chan struct{})}
	var err error
	n.e, err = masterelection.New(n.client, masterelection.Config{LockName: "herd-assign-example", NodeID: id, LockTTL: h.o.LockTTL,
		Capabilities: registry.Capabilities{MaxSubscriptions: h.o.Items, PreferredWorkload: 100}})
	if err != nil {
		return nil, err
	}
	cfg := assign.Config{Set: "cameras", LeaseTTL: h.o.Lease, Settle: h.o.LockTTL / 10}
	if n.p, err = assign.NewPlanner(n.client, n.e, cfg); err != nil {
		return nil, err
	}
	if n.w, err = assign.NewWorker(n.client, n.e, cfg); err != nil {
		return nil, err
	}
	_ = n.w.OnAssigned(h.b.work(id))
	if err := n.e.Start(ctx); err != nil {
		return nil, err
	}
	if err := n.w.Start(ctx); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	go func() { defer close(n.done); _ = n.p.Run(runCtx) }()
	h.nodes[id] = n
	return n, nil
}

// stop stops n gracefully: its items are given up, its lock released.
func (h *herd) stop(n *node) {
	n.cancel()
	<-n.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.w.Stop(ctx)
	_ = n.e.Stop(ctx)
	_ = n.client.Close()
	delete(h.nodes, n.id)
}

// kill closes n's client: nothing is renewed or given up.
func (h *herd) kill(n *node) {
	_ = n.client.Close()
	n.cancel()
	<-n.done
	delete(h.nodes, n.id)
	go func() { // its loops notice the closed client; let them end quietly
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.w.Stop(ctx)
		_ = n.e.Stop(ctx)
	}()
}

func (h *herd) master() *node {
	for _, n := range h.nodes {
		if n.e.IsMaster() {
			return n
		}
	}
	return nil
}

// settled waits until the master's last plan gives every item to a live
// slave, balanced over every live slave (they have equal capabilities:
// counts within one), and every item is owned by the slave that plan gives
// it.
func (h *herd) settled(ctx context.Context, items []string) error {
	for {
		m := h.master()
		if m != nil {
			want := m.p.Last()
			ok := len(want.Owner) == len(items)
			for _, owner := range want.Owner {
				if n := h.nodes[owner]; n == nil || n == m {
					ok = false
				}
			}
			lo, hi := len(items), 0
			for id, n := range h.nodes {
				if !slices.Equal(n.w.Owned(), want.Items(id)) {
					ok = false
				}
				if n != m {
					lo, hi = min(lo, len(want.Items(id))), max(hi, len(want.Items(id)))
				}
			}
			if hi-lo > 1 {
				ok = false
			}
			if ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not settled: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (h *herd) counts() string {
	ids := make([]string, 0, len(h.nodes))
	for id := range h.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := ""
	for _, id := range ids {
		role := "slave"
		if h.nodes[id].e.IsMaster() {
			role = "master"
		}
		out += fmt.Sprintf(" %s(%s)=%d", id, role, len(h.nodes[id].w.Owned()))
	}
	return out
}

// run plays the scenario and returns what it saw.
func run(ctx context.Context, newClient func() *redis.Client, o options, out io.Writer) (summary, error) {
	h := &herd{o: o, newClient: newClient, b: &book{spans: map[string][]span{}}, nodes: map[string]*node{}, out: out}
	defer func() {
		for _, n := range h.nodes {
			h.stop(n)
		}
		h.b.wg.Wait()
	}()
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		if _, err := h.start(ctx, id); err != nil {
			return summary{}, err
		}
	}
	items := make([]string, o.Items)
	for i := range items {
		items[i] = fmt.Sprintf("cam-%02d", i+1)
	}
	if err := h.nodes["n1"].p.SetItems(ctx, items...); err != nil {
		return summary{}, err
	}
	wait, cancel := context.WithTimeout(ctx, 30*o.LockTTL)
	defer cancel()
	if err := h.settled(wait, items); err != nil {
		return summary{}, err
	}
	since := time.Now()
	fmt.Fprintf(out, "settled:%s\n", h.counts())

	// Kill a slave: its items stay its own until its ownership expires and
	// the master, seeing it leave the registry, plans them elsewhere.
	var victim *node
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		if n := h.nodes[id]; !n.e.IsMaster() {
			victim = n
			break
		}
	}
	h.kill(victim)
	fmt.Fprintf(out, "killed %s\n", victim.id)
	if err := h.settled(wait, items); err != nil {
		return summary{}, err
	}
	fmt.Fprintf(out, "settled:%s\n", h.counts())

	// A new slave joins; as soon as the master has planned the move, it
	// restarts, and the next master finishes the plan.
	joiner, err := h.start(ctx, "n5")
	if err != nil {
		return summary{}, err
	}
	m := h.master()
	for {
		plan, err := m.p.Stored(ctx)
		if err != nil {
			return summary{}, err
		}
		if slices.Contains(slices.Collect(mapValues(plan.Owner)), joiner.id) {
			break
		}
		select {
		case <-wait.Done():
			return summary{}, errors.New("the master never planned for the new slave")
		case <-time.After(time.Millisecond):
		}
	}
	h.stop(m)
	fmt.Fprintf(out, "%s joined; master %s restarted mid-move\n", joiner.id, m.id)
	if _, err := h.start(ctx, m.id); err != nil {
		return summary{}, err
	}
	if err := h.settled(wait, items); err != nil {
		return summary{}, err
	}
	fmt.Fprintf(out, "settled:%s\n", h.counts())
	for _, n := range h.nodes {
		h.stop(n)
	}
	h.b.wg.Wait()
	return h.b.summarize(since), nil
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}
