package durable

import (
	"slices"
	"sync"
	"time"
)

// waits is a Router's memory for Config.Grace: the processes whose inbox
// a sweep found live, and when each of them was learned gone.
type waits struct {
	mu   sync.Mutex
	live map[string]bool      // guarded by mu: seen live, inbox still there
	left map[string]time.Time // guarded by mu: when each process of live was learned gone
}

// sawLive records that a sweep found id live: it is no longer waited for.
func (w *waits) sawLive(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live == nil {
		w.live, w.left = map[string]bool{}, map[string]time.Time{}
	}
	w.live[id] = true
	delete(w.left, id)
}

// removed records that the master removed id at t (its slave-removed
// event), if a sweep saw it live and it was not learned gone before.
func (w *waits) removed(id string, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.left[id]; w.live[id] && !ok {
		w.left[id] = t
	}
}

// until returns when the grace of id, found gone at now, ends: grace after
// it was learned gone; the zero time for a process never seen live, or
// grace negative.
func (w *waits) until(id string, now time.Time, grace time.Duration) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if grace < 0 || !w.live[id] {
		return time.Time{}
	}
	t, ok := w.left[id]
	if !ok {
		t = now
		w.left[id] = t
	}
	return t.Add(grace)
}

// next returns the earliest end of a grace after now; zero when none.
func (w *waits) next(now time.Time, grace time.Duration) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, t := range w.left {
		if end := t.Add(grace); now.Before(end) && (first.IsZero() || end.Before(first)) {
			first = end
		}
	}
	return first
}

// keep forgets the processes whose inbox is not in inboxes (deleted).
func (w *waits) keep(inboxes map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.live {
		if !inboxes[id] {
			delete(w.live, id)
			delete(w.left, id)
		}
	}
}

// Orphans returns the processes, not live, whose inboxes the last sweep
// could not move to a slave (sorted).
func (r *Router) Orphans() []string { return r.orphans.list() }

// orphans is the set of inboxes the last sweep left behind.
type orphans struct {
	mu  sync.Mutex
	ids []string // guarded by mu
}

// set replaces the set with ids, the last sweep's orphans.
func (o *orphans) set(ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = slices.Sorted(slices.Values(ids))
}

// list returns the set, sorted.
func (o *orphans) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ids)
}
