package assign

import (
	"maps"
	"sync"
	"time"
)

// departures is the Planner's memory of the slaves it listed, from which it
// keeps a departed slave's items planned to it for Config.Grace. Only
// update and end read or write seen and ends, under Planner.planning;
// removed is written by the slave-removed handler.
type departures struct {
	grace        time.Duration // Config.Grace; negative: none
	slaveTimeout time.Duration // the election's: older heartbeats mean a removal for silence

	mu      sync.Mutex
	removed map[string]time.Time // guarded by mu: when a slave-removed event named each slave

	seen map[string]time.Time // the newest LastSeen listed for each slave
	ends map[string]time.Time // departed slaves: when their grace ends (zero: none)
}

func newDepartures(grace, slaveTimeout time.Duration) *departures {
	return &departures{grace: grace, slaveTimeout: slaveTimeout,
		removed: map[string]time.Time{}, seen: map[string]time.Time{}, ends: map[string]time.Time{}}
}

// removedAt records that a slave-removed event named id at t.
func (d *departures) removedAt(id string, t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removed[id] = t
}

// update takes the plan's view at now: live maps each live slave to its
// LastSeen, owners holds the slaves the stored plan names. It returns the
// departed slaves to wait for (owners neither live nor self whose grace
// has not ended), each with the end of its grace, and forgets the slaves
// that are neither live nor owners.
func (d *departures) update(now time.Time, live map[string]time.Time, owners map[string]bool, self string) map[string]time.Time {
	d.mu.Lock()
	removed := maps.Clone(d.removed)
	d.mu.Unlock()
	for id, lastSeen := range live {
		if lastSeen.After(d.seen[id]) {
			d.seen[id] = lastSeen
		}
		delete(d.ends, id) // back, or never gone
	}
	waiting := map[string]time.Time{}
	for id := range owners {
		if _, ok := live[id]; ok || id == self {
			continue
		}
		end, ok := d.ends[id]
		if !ok {
			end = d.end(id, now, removed)
			d.ends[id] = end
		}
		if now.Before(end) {
			waiting[id] = end
		}
	}
	forget := func(id string) bool { _, ok := live[id]; return !ok && !owners[id] }
	maps.DeleteFunc(d.seen, func(id string, _ time.Time) bool { return forget(id) })
	maps.DeleteFunc(d.ends, func(id string, _ time.Time) bool { return forget(id) })
	d.mu.Lock()
	maps.DeleteFunc(d.removed, func(id string, t time.Time) bool {
		_, seen := d.seen[id]
		return !seen || live[id].After(t) // unknown, or back since
	})
	d.mu.Unlock()
	return waiting
}

// end returns when the grace of id, found departed at now, ends: Grace
// after it left. It left when the Planner learned it (its slave-removed
// event, else now) if the last heartbeat listed was at most SlaveTimeout
// older (it unregistered: a Stop), else at that heartbeat (the master
// removed it for silence: a crash). The zero time (no grace) for a slave
// never listed, or with the grace off.
func (d *departures) end(id string, now time.Time, removed map[string]time.Time) time.Time {
	lastSeen, ok := d.seen[id]
	if !ok || d.grace < 0 {
		return time.Time{}
	}
	left := now
	if r, ok := removed[id]; ok && r.After(lastSeen) && r.Before(now) {
		left = r
	}
	if left.Sub(lastSeen) > d.slaveTimeout {
		left = lastSeen
	}
	return left.Add(d.grace)
}
