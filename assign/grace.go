package assign

import (
	"maps"
	"sync"
	"time"

	"github.com/herdkit/herd/registry"
)

// departures is the Planner's memory of the slaves it listed, from which it
// keeps a departed slave's items planned to it for Config.Grace. Only
// update and end read or write seen and ends, under Planner.planning;
// removed is written by the slave-removed handler.
type departures struct {
	grace        time.Duration // Config.Grace; negative: none
	slaveTimeout time.Duration // the election's: older heartbeats mean a removal for silence

	mu      sync.Mutex
	removed map[string]removal // guarded by mu: the slave-removed event that named each slave

	seen map[string]time.Time // the newest LastSeen listed for each slave
	ends map[string]time.Time // departed slaves: when their grace ends (zero: none)
}

func newDepartures(grace, slaveTimeout time.Duration) *departures {
	return &departures{grace: grace, slaveTimeout: slaveTimeout,
		removed: map[string]removal{}, seen: map[string]time.Time{}, ends: map[string]time.Time{}}
}

// removal is a slave-removed event: when it came and why the slave left.
type removal struct {
	at  time.Time
	why registry.LeaveReason
}

// removedAt records that a slave-removed event named id at t, for why.
func (d *departures) removedAt(id string, t time.Time, why registry.LeaveReason) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removed[id] = removal{at: t, why: why}
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
	d.saw(live)
	waiting := map[string]time.Time{}
	for id := range owners {
		if _, ok := live[id]; ok || id == self {
			continue
		}
		if end := d.endOf(id, now, removed); now.Before(end) {
			waiting[id] = end
		}
	}
	d.forget(live, owners)
	return waiting
}

// saw records the last heartbeat of each live slave: its departure, if
// any, is over.
func (d *departures) saw(live map[string]time.Time) {
	for id, lastSeen := range live {
		if lastSeen.After(d.seen[id]) {
			d.seen[id] = lastSeen
		}
		delete(d.ends, id) // back, or never gone
	}
}

// endOf returns when the grace of the departed slave id ends, fixed when
// it was first found departed.
func (d *departures) endOf(id string, now time.Time, removed map[string]removal) time.Time {
	end, ok := d.ends[id]
	if !ok {
		end = d.end(id, now, removed)
		d.ends[id] = end
	}
	return end
}

// forget drops the slaves that are neither live nor owners, and the
// slave-removed events of slaves unknown or back since.
func (d *departures) forget(live map[string]time.Time, owners map[string]bool) {
	gone := func(id string) bool { _, ok := live[id]; return !ok && !owners[id] }
	maps.DeleteFunc(d.seen, func(id string, _ time.Time) bool { return gone(id) })
	maps.DeleteFunc(d.ends, func(id string, _ time.Time) bool { return gone(id) })
	d.mu.Lock()
	maps.DeleteFunc(d.removed, func(id string, r removal) bool {
		_, seen := d.seen[id]
		return !seen || live[id].After(r.at) // unknown, or back since
	})
	d.mu.Unlock()
}

// end returns when the grace of id, found departed at now, ends: Grace
// after it left (left). The zero time (no grace) for a slave never listed,
// or with the grace off.
func (d *departures) end(id string, now time.Time, removed map[string]removal) time.Time {
	lastSeen, ok := d.seen[id]
	if !ok || d.grace < 0 {
		return time.Time{}
	}
	r, heard := removed[id]
	return d.left(lastSeen, now, r, heard).Add(d.grace)
}

// left returns when a slave found departed at now left, from its last
// heartbeat listed and the slave-removed event r, when heard, that named
// it. The event says why: unregistered (a Stop), it left when the event
// came; removed for silence (a crash) or otherwise gone, it left at its
// last heartbeat listed. Without an event it left when the Planner found
// it gone, unless its last heartbeat listed was then more than
// SlaveTimeout old (then at that heartbeat).
func (d *departures) left(lastSeen, now time.Time, r removal, heard bool) time.Time {
	if !heard {
		return d.silentSince(lastSeen, now)
	}
	left := now
	if r.at.After(lastSeen) && r.at.Before(now) {
		left = r.at
	}
	switch {
	case r.why == registry.LeftUnregistered:
		return left // it stopped: from when it left, however old the last listing
	case r.why != "":
		return lastSeen // silent (or no longer a slave): from its last heartbeat
	}
	return d.silentSince(lastSeen, left)
}

// silentSince returns t, when a slave was found gone, or its last
// heartbeat lastSeen when t is more than SlaveTimeout after it: it fell
// silent there.
func (d *departures) silentSince(lastSeen, t time.Time) time.Time {
	if t.Sub(lastSeen) > d.slaveTimeout {
		return lastSeen
	}
	return t
}
