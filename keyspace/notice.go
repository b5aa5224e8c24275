package keyspace

import (
	"encoding/json"
	"fmt"
)

// The events of the notices herd's scripts publish. Lock notices go to
// Keys.Events (a release to a process of the master's succession goes to
// its Keys.Turn instead), registry notices to Keys.RegistryEvents.
const (
	// NoticeAcquired: acquire.lua made NodeID master under Term.
	NoticeAcquired = "acquired"
	// NoticeReleased: release.lua ended NodeID's mastership of Term; To
	// names the successor a Transfer reserved the lock for, if any.
	NoticeReleased = "released"
	// NoticeRegistered: a registry script wrote NodeID's entry (Role,
	// Process) where there was none, or registered it again.
	NoticeRegistered = "registered"
	// NoticeUnregistered: a registry script removed NodeID's entry; Reason
	// is "" (the process left), ReasonStale or ReasonExpired.
	NoticeUnregistered = "unregistered"
)

// The reasons of unregistered notices (Notice.Reason).
const (
	// ReasonStale: the master removed an entry whose lastSeen was older
	// than its SlaveTimeout (registry_remove.lua).
	ReasonStale = "stale"
	// ReasonExpired: a reader of the emulated backend removed an entry
	// whose TTL had run out (registry_expire.lua). The native backends
	// announce no expiry.
	ReasonExpired = "expired"
)

// Notice is one message of the notice channels, in the form the scripts
// publish it. Anyone who may PUBLISH on those channels can send one, so a
// notice is a hint to look at Redis, never a fact by itself.
type Notice struct {
	// Event is one of the Notice* constants (others are left to the reader).
	Event string `json:"event"`
	// NodeID is the process the notice is about.
	NodeID string `json:"nodeId"`
	// Term is the mastership's term (lock notices); 0 in registry notices.
	Term int64 `json:"term,omitempty"`
	// Version is the registry version the write minted (registry notices:
	// each write of registry_put, registry_remove and registry_expire mints
	// one), 0 when the notice carries none. A reader compares it with the
	// version it read with the entries to tell which is later.
	Version int64 `json:"version,omitempty"`
	// To is the successor a Transfer named (released notices).
	To string `json:"to,omitempty"`
	// Role is the role the entry was written with (registered notices).
	Role string `json:"role,omitempty"`
	// Process is the entry as written (registered notices), raw JSON.
	Process json.RawMessage `json:"process,omitempty"`
	// Reason tells why an entry was removed (unregistered notices).
	Reason string `json:"reason,omitempty"`
}

// ControlTransfer is the request of a ControlRequest that asks the master
// to hand over (masterelection.Transfer).
const ControlTransfer = "transfer"

// ControlRequest is a message on Keys.Control, an operator's request to the
// master: {"request":"transfer","to":"<node id>","term":<term>} asks the
// master of that term to hand over to that process ("" or no "to": to any
// candidate). Only the master of Term honours it, so a request sent again
// (pub/sub drops what a reconnecting subscriber misses) never moves the
// next master; a request without a term (0) is for whoever is master.
type ControlRequest struct {
	// Request is what is asked: ControlTransfer (others are ignored).
	Request string `json:"request"`
	// To is the node id to hand over to; "" for any candidate.
	To string `json:"to,omitempty"`
	// Term is the term of the master asked; 0 for whoever is master.
	Term int64 `json:"term,omitempty"`
}

// Lock reports whether n is a lock notice (acquired or released).
func (n Notice) Lock() bool { return n.Event == NoticeAcquired || n.Event == NoticeReleased }

// ParseNotice reads one notice. It accepts any JSON object with a string
// "event" member; the members herd does not write are ignored. A lock
// notice must carry a positive integer term.
func ParseNotice(payload []byte) (Notice, error) {
	var n Notice
	if err := json.Unmarshal(payload, &n); err != nil {
		return Notice{}, fmt.Errorf("%w %.96q: %v", ErrMalformedNotice, payload, err)
	}
	if n.Event == "" {
		return Notice{}, fmt.Errorf("%w %.96q: no event", ErrMalformedNotice, payload)
	}
	if n.Lock() && n.Term <= 0 {
		return Notice{}, fmt.Errorf("%w %.96q: a %s notice needs a positive term", ErrMalformedNotice, payload, n.Event)
	}
	return n, nil
}
