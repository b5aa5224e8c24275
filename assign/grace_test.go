package assign

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/herdkit/herd/registry"
)

// TestDepartureGrace: a departed slave's grace counts from the moment the
// Planner learned it left when its last listed heartbeat was then at most
// SlaveTimeout old (a Stop), from that heartbeat otherwise (a crash); a
// slave never listed, or with the grace off, gets none.
func TestDepartureGrace(t *testing.T) {
	const grace, slaveTimeout = 4 * time.Second, 3 * time.Second
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		grace    time.Duration
		lastSeen time.Duration // before now; 0: never listed
		removed  time.Duration // the slave-removed event, before now; 0: none heard
		why      registry.LeaveReason
		want     time.Duration // the grace's end, after now; 0: no wait
	}{
		{"stop: from the removal event", grace, 900 * time.Millisecond, 200 * time.Millisecond, registry.LeftUnregistered, grace - 200*time.Millisecond},
		{"stop after an old listing: from the removal event", grace, 3500 * time.Millisecond, 100 * time.Millisecond, registry.LeftUnregistered, grace - 100*time.Millisecond},
		{"stop, no event heard: from the plan", grace, 900 * time.Millisecond, 0, "", grace},
		{"crash: from the last heartbeat", grace, 3500 * time.Millisecond, 100 * time.Millisecond, registry.LeftStale, grace - 3500*time.Millisecond},
		{"crash soon after a listing: from the last heartbeat", grace, 900 * time.Millisecond, 100 * time.Millisecond, registry.LeftStale, grace - 900*time.Millisecond},
		{"no event, last heartbeat old: from it", grace, 3500 * time.Millisecond, 0, "", grace - 3500*time.Millisecond},
		{"crash long ago: no wait", grace, 5 * time.Second, 100 * time.Millisecond, registry.LeftStale, 0},
		{"never listed: no wait", grace, 0, 100 * time.Millisecond, registry.LeftUnregistered, 0},
		{"grace off", -1, 900 * time.Millisecond, 200 * time.Millisecond, registry.LeftUnregistered, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDepartures(tt.grace, slaveTimeout)
			owners := map[string]bool{"a": true, "b": true}
			if tt.lastSeen > 0 {
				d.update(now.Add(-tt.lastSeen), map[string]time.Time{"a": now.Add(-tt.lastSeen), "b": now}, owners, "m")
			}
			if tt.removed > 0 {
				d.removedAt("a", now.Add(-tt.removed), tt.why)
			}
			got := d.update(now, map[string]time.Time{"b": now}, owners, "m")
			want := map[string]time.Time{}
			if tt.want > 0 {
				want["a"] = now.Add(tt.want)
			}
			if !maps.Equal(got, want) {
				t.Fatalf("waiting %v, want %v", got, want)
			}
			// The end is kept: a later plan waits for the same end.
			later := now.Add(time.Second)
			got = d.update(later, map[string]time.Time{"b": later}, owners, "m")
			if end, ok := want["a"]; ok && later.Before(end) {
				if !maps.Equal(got, want) {
					t.Fatalf("a second later: waiting %v, want %v", got, want)
				}
			} else if len(got) > 0 {
				t.Fatalf("a second later: waiting %v, want none", got)
			}
		})
	}
}

// TestDepartureReturnAndForget: a slave listed again is no longer waited
// for, and departs afresh; a slave neither listed nor an owner is
// forgotten (it gets no grace if it owns items again without being listed
// again); the master itself is never waited for.
func TestDepartureReturnAndForget(t *testing.T) {
	d := newDepartures(4*time.Second, 3*time.Second)
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	owners := map[string]bool{"a": true, "m": true}
	d.update(t0, map[string]time.Time{"a": t0, "m": t0}, owners, "m")
	if got := d.update(t0.Add(time.Second), nil, owners, "m"); len(got) != 1 || !got["a"].Equal(t0.Add(5*time.Second)) {
		t.Fatalf("after a left: waiting %v, want a until t0+5s (and never the master)", got)
	}
	t1 := t0.Add(2 * time.Second)
	if got := d.update(t1, map[string]time.Time{"a": t1}, owners, "m"); len(got) != 0 {
		t.Fatalf("a is back: waiting %v, want none", got)
	}
	if got := d.update(t1.Add(time.Second), nil, owners, "m"); !got["a"].Equal(t1.Add(5 * time.Second)) {
		t.Fatalf("a left again: waiting %v, want a until t1+5s", got)
	}
	d.update(t1.Add(2*time.Second), nil, map[string]bool{}, "m") // its items moved
	if len(d.seen)+len(d.ends)+len(d.removed) != 0 {
		t.Fatalf("a is neither live nor an owner, still remembered: %v %v %v", d.seen, d.ends, d.removed)
	}
	if got := d.update(t1.Add(3*time.Second), nil, owners, "m"); len(got) != 0 {
		t.Fatalf("a forgotten: waiting %v, want none", got)
	}
}

// TestPinnedKeepsADepartedSlavesItems: within its grace a departed slave
// keeps its items, the live slaves keep theirs (nothing moves) and take
// every new item; when it comes back, nothing moves either; once its
// grace ended, only its items move.
func TestPinnedKeepsADepartedSlavesItems(t *testing.T) {
	all := equalSlaves(4, caps(100, 100))
	before, err := Assign(items(40), all)
	if err != nil {
		t.Fatal(err)
	}
	gone := all[1].ID
	live := slices.DeleteFunc(slices.Clone(all), func(s Slave) bool { return s.ID == gone })
	waiting := map[string]time.Time{gone: time.Now().Add(time.Hour)}

	during, err := pinned(before, items(40), live, waiting)
	if err != nil {
		t.Fatal(err)
	}
	if m := Moves(before, during); len(m) != 0 {
		t.Fatalf("within the grace %d items moved, first %+v", len(m), m[0])
	}
	more := items(44)
	grown, err := pinned(during, more, live, waiting)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Moves(during, grown) {
		if m.From != "" || m.To == gone || m.To == "" {
			t.Fatalf("a new item went wrong, or an old one moved: %+v", m)
		}
	}
	if got := grown.Items(gone); !slices.Equal(got, before.Items(gone)) {
		t.Fatalf("the departed slave holds %v, want %v", got, before.Items(gone))
	}

	back, err := pinned(during, items(40), all, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := Moves(during, back); len(m) != 0 {
		t.Fatalf("after its return %d items moved, first %+v", len(m), m[0])
	}

	after, err := pinned(during, items(40), live, nil)
	if err != nil {
		t.Fatal(err)
	}
	moves := Moves(during, after)
	if len(moves) != len(before.Items(gone)) {
		t.Fatalf("after the grace %d items moved, want the departed slave's %d", len(moves), len(before.Items(gone)))
	}
	for _, m := range moves {
		if m.From != gone || m.To == "" || m.To == gone {
			t.Fatalf("after the grace: %+v", m)
		}
	}
}

// TestGraceDefault: the default Grace follows the LockTTL, a negative one
// stays (off), a set one is kept.
func TestGraceDefault(t *testing.T) {
	for _, tc := range []struct {
		lockTTL, grace, want time.Duration
	}{
		{6 * time.Second, 0, 4 * time.Second},
		{30 * time.Second, 0, 20 * time.Second},
		{6 * time.Second, -1, -1},
		{6 * time.Second, time.Second, time.Second},
	} {
		if got := (Config{Grace: tc.grace}).withDefaults(tc.lockTTL).Grace; got != tc.want {
			t.Errorf("Grace %v at LockTTL %v: %v, want %v", tc.grace, tc.lockTTL, got, tc.want)
		}
	}
}
