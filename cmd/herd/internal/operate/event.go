package operate

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// EventKind names what a watch Event reports.
type EventKind string

// The kinds of watch events. Each reports a change that a read of Redis
// confirmed, except EventError.
const (
	// EventState: the state when the watch began (Message sums it up;
	// NodeID and Term name the master, if any), or again once Redis answers
	// after an EventError.
	EventState EventKind = "state"
	// EventAcquired: NodeID became master under Term.
	EventAcquired EventKind = "acquired"
	// EventReleased: NodeID's mastership of Term ended by a release; To is
	// the successor a Transfer named. Reason is "unannounced" when no
	// release notice came: the lock was released or deleted, and the time
	// of the end is only bounded.
	EventReleased EventKind = "released"
	// EventExpired: the lock of NodeID's mastership of Term expired: nobody
	// renewed it, and for a while there is no master.
	EventExpired EventKind = "expired"
	// EventFailover: NodeID became master under Term after From's
	// mastership of FromTerm ended; Gap is the time without a master
	// between the two (an upper bound when GapAtMost).
	EventFailover EventKind = "failover"
	// EventRegistered: NodeID's registry entry appeared, with Role.
	EventRegistered EventKind = "registered"
	// EventUnregistered: NodeID's registry entry was removed. Reason is
	// "left" (the process unregistered), "stale" (the master removed it for
	// a heartbeat older than its slave timeout) or "unannounced" (no notice
	// came).
	EventUnregistered EventKind = "unregistered"
	// EventProcessExpired: NodeID's registry entry expired: no heartbeat
	// for its TTL.
	EventProcessExpired EventKind = "process-expired"
	// EventRole: NodeID's registry entry changed its role to Role.
	EventRole EventKind = "role"
	// EventWarning: a new warning of the snapshot (Message); see
	// Snapshot.Warnings.
	EventWarning EventKind = "warning"
	// EventError: Redis could not be read (Message); the watch goes on and
	// reads again.
	EventError EventKind = "error"
)

// Event is one change a Watcher saw.
type Event struct {
	// Time is when the watcher saw it, by the local clock.
	Time time.Time
	// At is when it happened, by the server's clock, when known: the start
	// of a mastership (acquired, failover), the end of one (released: when
	// the notice came; expired: when the lock's TTL ran out).
	At time.Time
	// Kind is what happened; it tells which other fields are set.
	Kind EventKind
	// NodeID is the process the event is about (the new master of a
	// failover).
	NodeID string
	// Identifier is the process's human-readable name, when known.
	Identifier string
	// Term is the mastership's term.
	Term int64
	// From and FromTerm name the mastership before a failover.
	From     string
	FromTerm int64
	// To is the successor a released mastership was handed to.
	To string
	// Gap is a failover's time without a master; GapAtMost makes it an
	// upper bound.
	Gap       time.Duration
	GapAtMost bool
	// Role is the role of a registered process, or its new role.
	Role string
	// Reason qualifies a release or an unregistration.
	Reason string
	// Message is the text of a state, warning or error event.
	Message string
}

// MarshalJSON writes the event as one JSON object: time (RFC 3339 with
// milliseconds), at (the same, by the server's clock, when known), event
// (the kind), and the fields the kind sets: nodeId,
// identifier, term, from, fromTerm, to, gapMs, gapAtMost, role, reason,
// message.
func (e Event) MarshalJSON() ([]byte, error) {
	type wire struct {
		Time       string `json:"time"`
		At         string `json:"at,omitempty"`
		Event      string `json:"event"`
		NodeID     string `json:"nodeId,omitempty"`
		Identifier string `json:"identifier,omitempty"`
		Term       int64  `json:"term,omitempty"`
		From       string `json:"from,omitempty"`
		FromTerm   int64  `json:"fromTerm,omitempty"`
		To         string `json:"to,omitempty"`
		GapMs      *int64 `json:"gapMs,omitempty"`
		GapAtMost  bool   `json:"gapAtMost,omitempty"`
		Role       string `json:"role,omitempty"`
		Reason     string `json:"reason,omitempty"`
		Message    string `json:"message,omitempty"`
	}
	w := wire{
		Time: e.Time.Format("2006-01-02T15:04:05.000Z07:00"), Event: string(e.Kind),
		NodeID: e.NodeID, Identifier: e.Identifier, Term: e.Term, From: e.From, FromTerm: e.FromTerm,
		To: e.To, GapAtMost: e.GapAtMost, Role: e.Role, Reason: e.Reason, Message: e.Message,
	}
	if !e.At.IsZero() {
		w.At = e.At.Format("2006-01-02T15:04:05.000Z07:00")
	}
	if e.Kind == EventFailover {
		gap := e.Gap.Milliseconds()
		w.GapMs = &gap
	}
	return json.Marshal(w)
}

// Text describes the event in one line, without its time.
func (e Event) Text() string {
	who := e.NodeID
	if e.Identifier != "" && e.Identifier != e.NodeID {
		who += " (" + e.Identifier + ")"
	}
	switch e.Kind {
	case EventState, EventWarning:
		return e.Message
	case EventError:
		return e.Message + "; reading again"
	case EventAcquired:
		return fmt.Sprintf("%s is master, term %d", who, e.Term)
	case EventReleased:
		s := fmt.Sprintf("%s released the lock, term %d", e.NodeID, e.Term)
		if e.To != "" {
			s += ", handing over to " + e.To
		}
		if e.Reason == "unannounced" {
			s += " (no release notice: released or deleted)"
		}
		return s
	case EventExpired:
		return fmt.Sprintf("the lock of %s, term %d, expired: no master", e.NodeID, e.Term)
	case EventFailover:
		gap := FormatGap(e.Gap)
		if e.GapAtMost {
			gap = "at most " + gap
		}
		return fmt.Sprintf("failover %s → %s in %s without a master (term %d → %d)", e.From, e.NodeID, gap, e.FromTerm, e.Term)
	case EventRegistered:
		return fmt.Sprintf("%s registered as %s", who, e.Role)
	case EventUnregistered:
		switch e.Reason {
		case "stale":
			return e.NodeID + " removed by the master: heartbeat too old"
		case "unannounced":
			return e.NodeID + " unregistered (no notice: removed or expired)"
		}
		return e.NodeID + " unregistered: it left"
	case EventProcessExpired:
		return e.NodeID + " expired: no heartbeat within its TTL"
	case EventRole:
		return fmt.Sprintf("%s is %s in the registry", e.NodeID, e.Role)
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s %s", e.Kind, e.NodeID, e.Message))
}

// FormatGap writes a failover's gap: milliseconds below ten seconds
// ("0ms", "312ms", "4210ms"), else as FormatAge.
func FormatGap(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%dms", max(d, 0).Milliseconds())
	}
	return FormatAge(d)
}
