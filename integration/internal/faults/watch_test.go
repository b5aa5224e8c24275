//go:build linux

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/registry"
)

// watchInterval is how often the registry watcher reads every entry.
const watchInterval = 100 * time.Millisecond

// watcher is the membership oracle's eye: a plain client that records every
// notice on <lock>:registry-events (KindRegNotice) and reads the registry
// every watchInterval (KindRegPoll), with instants on the clock of Now.
type watcher struct {
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	ps   *redis.PubSub
}

// watch starts the watcher; it is subscribed when watch returns.
func (c *cluster) watch() *watcher {
	c.t.Helper()
	w := &watcher{stop: make(chan struct{})}
	ctx := context.Background()
	w.ps = c.admin.Subscribe(ctx, c.keys.RegistryEvents)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := w.ps.Receive(rctx)
	cancel()
	if err != nil {
		c.t.Fatalf("registry watcher: subscribe: %v", err)
	}
	rctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	reg, err := registry.New(rctx, c.admin, c.keys, registry.Config{})
	cancel()
	if err != nil {
		c.t.Fatalf("registry watcher: %v", err)
	}
	c.add(Record{Kind: KindNote, Detail: "registry backend: " + string(reg.Backend())})
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		for msg := range w.ps.Channel() {
			c.add(noticeRecord(msg.Payload))
		}
	}()
	go func() {
		defer w.wg.Done()
		c.pollRegistry(reg, w.stop)
	}()
	return w
}

// close stops the watcher and waits for it.
func (w *watcher) close() {
	w.once.Do(func() {
		close(w.stop)
		_ = w.ps.Close()
	})
	w.wg.Wait()
}

// monoOffset returns the wall clock minus the clock of Now, in ns: what
// converts a wall-clock instant written by a process of this machine.
func monoOffset() int64 { return time.Now().UnixNano() - Now() }

// registryNotice is the JSON of a registry notice, forged ones included.
type registryNotice struct {
	Event   string          `json:"event"`
	NodeID  string          `json:"nodeId"`
	Role    string          `json:"role"`
	Version int64           `json:"version"`
	Reason  string          `json:"reason"`
	Process json.RawMessage `json:"process"`
	Forged  bool            `json:"forged"`
}

// noticeRecord turns a payload of the registry channel into a record.
func noticeRecord(payload string) Record {
	t := Now()
	var n registryNotice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return Record{T: t, Kind: KindRegNotice, Detail: fmt.Sprintf("unreadable %.120q", payload)}
	}
	r := Record{T: t, Kind: KindRegNotice, Peer: n.NodeID, Role: n.Role, Seq: n.Version, Detail: n.Event}
	if n.Reason != "" {
		r.Detail += " reason=" + n.Reason
	}
	if n.Forged {
		r.Detail += " forged"
	}
	var p struct {
		Term     int64     `json:"term"`
		LastSeen time.Time `json:"lastSeen"`
	}
	if len(n.Process) > 0 && json.Unmarshal(n.Process, &p) == nil {
		r.Term = p.Term
		if !p.LastSeen.IsZero() {
			r.Seen = p.LastSeen.UnixNano() - (time.Now().UnixNano() - Now())
		}
	}
	return r
}

// pollRegistry reads every entry each watchInterval until stop is closed.
func (c *cluster) pollRegistry(reg *registry.Registry, stop <-chan struct{}) {
	var prev map[string]Listed
	for {
		select {
		case <-stop:
			return
		case <-time.After(watchInterval):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		begin := Now()
		procs, err := reg.Processes(ctx)
		end := Now()
		cancel()
		if err != nil {
			continue
		}
		off := monoOffset()
		cur := map[string]Listed{}
		var entries []Listed
		for _, p := range procs {
			e := Listed{ID: p.ProcessID, Role: string(p.Role), Term: p.Term, LastSeen: p.LastSeen.UnixNano() - off}
			entries = append(entries, e)
			cur[e.ID] = e
		}
		c.add(Record{T: end, Begin: begin, Kind: KindRegPoll, Detail: FormatListing(entries)})
		if change := listingChange(prev, cur); change != "" {
			c.add(Record{T: end, Kind: KindRegChange, Detail: change})
		}
		prev = cur
	}
}

// listingChange describes what changed from prev to cur: "+id(role)" for
// a new entry, "-id" for one gone, "~id(role term)" for a new role or term.
func listingChange(prev, cur map[string]Listed) string {
	var parts []string
	for id, e := range cur {
		p, ok := prev[id]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("+%s(%s %d)", id, e.Role, e.Term))
		case p.Role != e.Role || p.Term != e.Term:
			parts = append(parts, fmt.Sprintf("~%s(%s %d)", id, e.Role, e.Term))
		}
	}
	for id := range prev {
		if _, ok := cur[id]; !ok {
			parts = append(parts, "-"+id)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
