package registry

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/keyspace"
)

// Role is the role a process has in its election.
type Role string

// The two roles of the specification.
const (
	RoleMaster Role = "master"
	RoleSlave  Role = "slave"
)

// known reports whether r is one of the two roles.
func (r Role) known() bool {
	return r == RoleMaster || r == RoleSlave
}

// Capabilities are what a process offers for work assignment (the
// specification's ProcessCapabilities).
type Capabilities struct {
	// CanProcessDetections tells whether the process can handle detection work.
	CanProcessDetections bool `json:"canProcessDetections"`
	// MaxSubscriptions is the largest number of subscriptions it accepts.
	MaxSubscriptions int `json:"maxSubscriptions"`
	// PreferredWorkload is the load it prefers, in percent (0-100).
	PreferredWorkload int `json:"preferredWorkload"`
}

// ProcessInfo is one registry entry. Its JSON form uses the specification's
// member names, so processes written to the specification in other languages
// read herd's entries and herd reads theirs. The members after Capabilities
// are herd's extensions and are omitted when empty.
type ProcessInfo struct {
	// ProcessID identifies the process; it names its channel.
	ProcessID string `json:"processId"`
	// NodeID is the election node id; the same as ProcessID in herd.
	NodeID string `json:"nodeId"`
	// Role is the process's current role.
	Role Role `json:"role"`
	// LastSeen is the time of the last heartbeat.
	LastSeen time.Time `json:"-"`
	// Capabilities are what the process offers.
	Capabilities Capabilities `json:"capabilities"`

	// Identifier is the human-readable process name (herd extension).
	Identifier string `json:"identifier,omitempty"`
	// RegisteredAt is the time of the first registration (herd extension).
	RegisteredAt time.Time `json:"-"`
	// Metadata is free-form application data (herd extension).
	Metadata map[string]any `json:"metadata,omitempty"`
	// NonCandidate is set for a process that does not contend for
	// mastership (herd extension): a master leaves it out of the slaves it
	// ranks to take over first.
	NonCandidate bool `json:"nonCandidate,omitempty"`
	// Priority is the process's preference for mastership (herd
	// extension; masterelection.Config.Priority): a master hands over to a
	// candidate of higher priority once it has been ready for the master's
	// HandBackWindow, and ranks higher priorities first in its succession.
	// 0, the default, is omitted; entries written by other programs read 0.
	Priority int `json:"priority,omitempty"`
	// Term is the fencing term of the mastership when Role is master (herd extension).
	Term int64 `json:"term,omitempty"`
	// Incarnation names one run of the process (herd extension): a
	// masterelection draws a new one at New, so two processes started
	// under one id differ in it. With Config.Quiet set, a write is refused
	// while the live entry is another incarnation's and was written within
	// Quiet (ErrInUse).
	Incarnation string `json:"incarnation,omitempty"`
	// Version is the entry's version (herd extension), minted by Redis on
	// every registry write: larger than every version written before on the
	// lock name, so of two reads of one process the larger Version is the
	// later state. Register ignores it; 0 in entries written by other
	// programs.
	Version int64 `json:"version,omitempty"`
}

// processJSON is the wire form: timestamps as strings, so that the
// JavaScript form is written and lenient forms are read.
type processJSON struct {
	ProcessID    string         `json:"processId"`
	NodeID       string         `json:"nodeId"`
	Role         Role           `json:"role"`
	LastSeen     jsTime         `json:"lastSeen"`
	Capabilities Capabilities   `json:"capabilities"`
	Identifier   string         `json:"identifier,omitempty"`
	RegisteredAt *jsTime        `json:"registeredAt,omitempty"`
	Metadata     map[string]any `json:"metadata,omitempty"`
	NonCandidate bool           `json:"nonCandidate,omitempty"`
	Priority     int            `json:"priority,omitempty"`
	Term         int64          `json:"term,omitempty"`
	Incarnation  string         `json:"incarnation,omitempty"`
	Version      int64          `json:"version,omitempty"`
}

// MarshalJSON writes the specification's form, with timestamps as
// JavaScript's toISOString writes them (UTC, milliseconds, "Z").
func (p ProcessInfo) MarshalJSON() ([]byte, error) {
	w := processJSON{
		ProcessID: p.ProcessID, NodeID: p.NodeID, Role: p.Role,
		LastSeen: jsTime(p.LastSeen), Capabilities: p.Capabilities,
		Identifier: p.Identifier, Metadata: p.Metadata, NonCandidate: p.NonCandidate, Priority: p.Priority, Term: p.Term,
		Incarnation: p.Incarnation, Version: p.Version,
	}
	if !p.RegisteredAt.IsZero() {
		t := jsTime(p.RegisteredAt)
		w.RegisteredAt = &t
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the specification's form leniently: timestamps may be
// RFC 3339 with any precision or offset, or milliseconds since the epoch.
func (p *ProcessInfo) UnmarshalJSON(b []byte) error {
	var w processJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*p = w.info()
	return nil
}

// info converts the wire form.
func (w *processJSON) info() ProcessInfo {
	p := ProcessInfo{
		ProcessID: w.ProcessID, NodeID: w.NodeID, Role: w.Role,
		LastSeen: time.Time(w.LastSeen), Capabilities: w.Capabilities,
		Identifier: w.Identifier, Metadata: w.Metadata, NonCandidate: w.NonCandidate, Priority: w.Priority, Term: w.Term,
		Incarnation: w.Incarnation, Version: w.Version,
	}
	if w.RegisteredAt != nil {
		p.RegisteredAt = time.Time(*w.RegisteredAt)
	}
	return p
}

// SlaveNode is a slave as the master sees it (the specification's SlaveNode).
type SlaveNode struct {
	// NodeID identifies the slave; in herd it is also its process id.
	NodeID string `json:"nodeId"`
	// Identifier is the slave's human-readable process name.
	Identifier string `json:"identifier"`
	// RegisteredAt is the time of the slave's first registration.
	RegisteredAt time.Time `json:"registeredAt"`
	// LastSeen is the time of the slave's last heartbeat.
	LastSeen time.Time `json:"lastSeen"`
	// Metadata is the slave's free-form application data.
	Metadata map[string]any `json:"metadata,omitempty"`
	// Capabilities are what the slave published: what rebalancing weighs
	// (package assign does).
	Capabilities Capabilities `json:"capabilities"`
	// NonCandidate is set when the slave does not contend for mastership.
	NonCandidate bool `json:"nonCandidate,omitempty"`
	// Priority is the slave's preference for mastership (ProcessInfo.Priority).
	Priority int `json:"priority,omitempty"`
	// Incarnation names the run of the slave (ProcessInfo.Incarnation).
	Incarnation string `json:"incarnation,omitempty"`
}

// Slave returns p as a SlaveNode.
func (p ProcessInfo) Slave() SlaveNode {
	return SlaveNode{NodeID: p.NodeID, Identifier: p.Identifier, RegisteredAt: p.RegisteredAt, LastSeen: p.LastSeen,
		Metadata: p.Metadata, Capabilities: p.Capabilities, NonCandidate: p.NonCandidate, Priority: p.Priority,
		Incarnation: p.Incarnation}
}

// holds reports whether p is the process that holds the master lock, whose
// value is master (the holder's node id, "" when there is none): a slave
// read leaves it out whatever its entry says.
func (p ProcessInfo) holds(master string) bool {
	return master != "" && (p.ProcessID == master || p.NodeID == master)
}

// listedAs reports whether p is listed under role in a read that found
// master holding the lock: its entry says role, and a slave's entry is not
// the lock holder's.
func (p ProcessInfo) listedAs(role Role, master string) bool {
	return p.Role == role && !(role == RoleSlave && p.holds(master))
}

// jsTime is a time written as JavaScript's Date.prototype.toISOString.
type jsTime time.Time

// MarshalText writes t in wire.TimeLayout, and the zero time as "";
// encoding/json quotes it.
func (t jsTime) MarshalText() ([]byte, error) {
	if time.Time(t).IsZero() {
		return nil, nil
	}
	return time.Time(t).UTC().AppendFormat(nil, wire.TimeLayout), nil
}

// UnmarshalJSON reads a timestamp leniently (wire.ParseTime).
func (t *jsTime) UnmarshalJSON(b []byte) error {
	v, err := wire.ParseTime(b)
	if err != nil {
		return err
	}
	*t = jsTime(v)
	return nil
}

// MaxMetadataBytes is the largest ProcessInfo.Metadata that Register accepts,
// measured as its JSON encoding (16 KiB). Every heartbeat rewrites the whole
// entry and every registration notice carries it, so it must stay small.
const MaxMetadataBytes = 16 << 10

// Validate checks what Register needs to store p: an id that fits in a
// channel name (keyspace.ValidateName, at most keyspace.MaxNameLen bytes), a
// known role, and metadata that encodes to at most MaxMetadataBytes.
// Errors wrap ErrInvalidProcess or ErrMetadataTooLarge. Register calls it;
// masterelection calls it at New and SetMetadata, so that what would be
// refused later is refused at the call.
func (p ProcessInfo) Validate() error {
	if err := p.checkNames(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidProcess, err)
	}
	if !p.Role.known() {
		return fmt.Errorf("%w: role %q of process %q is neither %q nor %q", ErrInvalidProcess, p.Role, p.ProcessID, RoleMaster, RoleSlave)
	}
	return p.checkMetadata()
}

// checkNames checks the names of p that go into keys and channels
// (keyspace.ValidateName): ProcessID, and NodeID and Incarnation unless
// they are empty.
func (p ProcessInfo) checkNames() error {
	if err := keyspace.ValidateName("ProcessID", p.ProcessID); err != nil {
		return err
	}
	if err := optionalName("NodeID", p.NodeID); err != nil {
		return err
	}
	return optionalName("Incarnation", p.Incarnation)
}

// optionalName is keyspace.ValidateName for a name that may be empty.
func optionalName(what, name string) error {
	if name == "" {
		return nil
	}
	return keyspace.ValidateName(what, name)
}

// checkMetadata checks that p's metadata encodes, to at most
// MaxMetadataBytes.
func (p ProcessInfo) checkMetadata() error {
	b, err := json.Marshal(p.Metadata)
	if err != nil {
		return fmt.Errorf("%w: metadata of process %q: %w", ErrInvalidProcess, p.ProcessID, err)
	}
	if len(b) > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata of process %q is %d bytes encoded, the limit is %d", ErrMetadataTooLarge, p.ProcessID, len(b), MaxMetadataBytes)
	}
	return nil
}

// decodeProcess reads a stored ProcessInfo leniently but checks its shape: a
// JSON object with a processId (equal to field unless field is "") and a role
// of master or slave. Unknown members are ignored. A missing nodeId means the
// processId, as in the specification. The error describes what is wrong;
// callers wrap it with ErrCorruptEntry and the place it was read from.
func decodeProcess(field, value string) (ProcessInfo, error) {
	p, err := readEntry(value)
	if err != nil {
		return ProcessInfo{}, err
	}
	if err := checkShape(field, &p); err != nil {
		return ProcessInfo{}, err
	}
	p.NodeID = cmp.Or(p.NodeID, p.ProcessID)
	return p, nil
}

// readEntry reads value, in the form herd writes (herdsForm) or else
// leniently with encoding/json, which says what is wrong.
func readEntry(value string) (ProcessInfo, error) {
	if p, ok := herdsForm(value); ok {
		return p, nil
	}
	var w processJSON
	if err := json.Unmarshal([]byte(value), &w); err != nil {
		return ProcessInfo{}, err
	}
	return w.info(), nil
}

// checkShape checks what decodeProcess requires of an entry read from
// field ("" when it is not read from a field): a processId, equal to
// field, and a role of master or slave.
func checkShape(field string, p *ProcessInfo) error {
	switch {
	case p.ProcessID == "":
		return errors.New("no processId")
	case field != "" && p.ProcessID != field:
		return fmt.Errorf("processId %q differs from the field name", wire.Truncate(p.ProcessID))
	case !p.Role.known():
		return fmt.Errorf("role %q is neither %q nor %q", wire.Truncate(string(p.Role)), RoleMaster, RoleSlave)
	}
	return nil
}

// copyMetadata returns a deep copy of m made through its JSON form, so that
// the registry keeps no reference into the caller's maps. m must encode.
func copyMetadata(m map[string]any) map[string]any {
	b, err := json.Marshal(m) // nil encodes as null, which decodes as nil
	if err != nil {
		return nil
	}
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}
