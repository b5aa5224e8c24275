package operate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// Master is the master of a lock as Redis shows it.
type Master struct {
	// NodeID is the node id the lock holds.
	NodeID string
	// Identifier is the master's human-readable name, from its master
	// entry ("" when the entry is missing).
	Identifier string
	// Term is the fencing term of the mastership (0: the term key is
	// missing, Redis lost data).
	Term int64
	// Since is when the mastership began, by the server's clock: the
	// acquire script mints the term as max(previous term + 1, server time
	// in ms), so a term is its acquisition time to the millisecond. Zero
	// when the term is not a time (it was minted after a backward step of
	// the server's clock, or by another program).
	Since time.Time
	// Held is how long the master has held the lock (Snapshot.Time minus
	// Since); -1 when Since is unknown.
	Held time.Duration
	// TTL is the lock's remaining time to live; -1 when it has no expiry.
	TTL time.Duration
}

// Process is one registry entry and the age of its last heartbeat.
type Process struct {
	// Info is the entry as stored.
	Info registry.ProcessInfo
	// Age is Snapshot.Time minus Info.LastSeen (negative when the process's
	// clock is ahead of the server's).
	Age time.Duration
}

// Snapshot is what Redis shows of one lock name at one instant.
type Snapshot struct {
	// Lock is the lock name.
	Lock string
	// Backend is the registry backend the server gets.
	Backend registry.Backend
	// Time is the server's clock at the read.
	Time time.Time
	// Local is the local clock at the same instant, as well as it is known:
	// the middle of the round trip that read Time.
	Local time.Time
	// Master is the master; nil when nobody holds the lock.
	Master *Master
	// Processes are the live registry entries, sorted by process id.
	Processes []Process
	// Warnings describe what is inconsistent, one sentence each.
	Warnings []string
	// LastTerm is the last term minted on the lock name; 0 when the term
	// key is missing.
	LastTerm int64
	// Known is false when nothing exists under the lock name: no term key,
	// no master, no registry entry.
	Known bool
	// ProcessTTL is the TTL ages are compared with (Reader's processTTL).
	ProcessTTL time.Duration
	// DeadLetters is the number of dead letters of durable routing
	// (keyspace.Keys.Dead, herd dead list); -1 when it could not be read,
	// then DeadLettersError says why (a user whose ACL lacks XLEN on the
	// dead-letter stream, say): the count never fails a read.
	DeadLetters int64
	// DeadLettersError is why DeadLetters could not be read; "" when it
	// was.
	DeadLettersError string
	// Assignments summarize the item sets the Reader watches
	// (WatchAssignments); nil when it watches none.
	Assignments []AssignSummary
	// Cluster is true on a Redis Cluster. Slot is then the hash slot of
	// herd's keys (they share it: the lock name is their hash tag) and
	// SlotNode the address of the master node serving it, as the client's
	// slot map says ("" when it names none).
	Cluster  bool
	Slot     int
	SlotNode string
}

// ByRole returns the processes of role r ("" for all).
func (s Snapshot) ByRole(r registry.Role) []Process {
	if r == "" {
		return s.Processes
	}
	var out []Process
	for _, p := range s.Processes {
		if p.Info.Role == r {
			out = append(out, p)
		}
	}
	return out
}

// Reader reads snapshots of one lock name. It is safe for concurrent use.
type Reader struct {
	conn       *Conn
	reg        *registry.Registry
	processTTL time.Duration

	mu         sync.Mutex
	corrupt    []string // corrupt entries the registry reported during the current read
	assignSets []string // item sets every read summarizes (WatchAssignments)
}

// NewReader returns a Reader for conn's lock. processTTL is the processes'
// ProcessTTL (registry.DefaultProcessTTL when 0): an entry whose heartbeat
// is older is warned about. It probes the server for the registry backend
// (one script call, see package registry).
func NewReader(ctx context.Context, conn *Conn, processTTL time.Duration) (*Reader, error) {
	if processTTL <= 0 {
		processTTL = registry.DefaultProcessTTL
	}
	r := &Reader{conn: conn, processTTL: processTTL}
	reg, err := registry.New(ctx, conn.Client, conn.Keys, registry.Config{OnError: r.reportCorrupt})
	if err != nil {
		return nil, Classify("open the process registry", err)
	}
	r.reg = reg
	return r, nil
}

// Registry returns the process registry the Reader reads.
func (r *Reader) Registry() *registry.Registry { return r.reg }

// Conn returns the connection the Reader reads through.
func (r *Reader) Conn() *Conn { return r.conn }

func (r *Reader) reportCorrupt(err error) {
	r.mu.Lock()
	r.corrupt = append(r.corrupt, err.Error())
	r.mu.Unlock()
}

// Read reads the lock, the master's entry, the registry, the number of
// dead letters and the server's clock. When the lock changed hands during the read it reads again (up to
// three times), so the warnings compare one state of the lock with the
// registry. A corrupt registry entry is reported in Warnings by the first
// Read of a Reader that meets it (package registry reports each value
// once).
func (r *Reader) Read(ctx context.Context) (Snapshot, error) {
	var snap Snapshot
	var err error
	for range 3 {
		var stable bool
		if snap, stable, err = r.read(ctx); err != nil || stable {
			break
		}
	}
	return snap, err
}

func (r *Reader) read(ctx context.Context) (Snapshot, bool, error) {
	c, k := r.conn.Client, r.conn.Keys
	r.mu.Lock()
	r.corrupt = nil
	r.mu.Unlock()

	sent := time.Now()
	now, err := c.Time(ctx).Result()
	local := sent.Add(time.Since(sent) / 2)
	if err != nil {
		return Snapshot{}, false, Classify("read the server's clock (TIME)", err)
	}
	st, err := rdb.Check(ctx, c, k)
	if err != nil {
		return Snapshot{}, false, Classify("check the lock "+k.Master, err)
	}
	s := Snapshot{Lock: r.conn.Lock, Backend: r.reg.Backend(), Time: now, Local: local, LastTerm: st.Term, ProcessTTL: r.processTTL}
	if cc, ok := c.(*redis.ClusterClient); ok {
		s.Cluster, s.Slot = true, subhub.Slot(k.Master)
		if node, err := cc.MasterForKey(ctx, k.Master); err == nil {
			s.SlotNode = node.Options().Addr
		}
	}
	var warnings []string
	if st.Garbage != "" {
		warnings = append(warnings, "garbage: "+st.Garbage)
	}
	if st.Exists && st.NodeID != "" {
		m := &Master{NodeID: st.NodeID, Term: st.Term, TTL: st.TTL, Held: -1}
		if st.TermMissing {
			m.Term = 0
			warnings = append(warnings, fmt.Sprintf("%s holds the lock, but the term key %s is missing: Redis lost data, and the master's term is unknown", st.NodeID, k.Term))
		}
		if since, ok := termTime(m.Term, now); ok {
			m.Since, m.Held = since, max(now.Sub(since), 0)
		}
		info, err := r.reg.MasterProcess(ctx)
		switch {
		case err == nil && info.NodeID == st.NodeID:
			m.Identifier = info.Identifier
		case err == nil, errors.Is(err, registry.ErrNotFound):
		case errors.Is(err, registry.ErrCorruptEntry):
			warnings = append(warnings, err.Error())
		default:
			return Snapshot{}, false, Classify("read the master's entry "+k.MasterProcess, err)
		}
		s.Master = m
	}
	infos, err := r.reg.Processes(ctx)
	if err != nil {
		return Snapshot{}, false, Classify("read the process registry "+k.Processes, err)
	}
	s.Processes = make([]Process, len(infos))
	for i, p := range infos {
		s.Processes[i] = Process{Info: p, Age: now.Sub(p.LastSeen)}
	}
	s.DeadLetters, err = c.XLen(ctx, k.Dead).Result()
	if err != nil {
		s.DeadLetters, s.DeadLettersError = -1, Classify("count the dead letters of "+k.Dead+" (XLEN)", err).Error()
	}
	s.Assignments = r.summarizeAssignments(ctx)
	r.mu.Lock()
	corrupt := r.corrupt
	r.mu.Unlock()

	s.Known = st.Exists || !st.TermMissing || len(infos) > 0 || len(corrupt) > 0
	if s.Known && s.Master == nil {
		warnings = append(warnings, "no master: nobody holds the lock "+k.Master)
	}
	for _, p := range s.Processes {
		if p.Info.Role == registry.RoleMaster && (s.Master == nil || s.Master.NodeID != p.Info.NodeID ||
			(p.Info.Term != 0 && s.Master.Term != 0 && p.Info.Term != s.Master.Term)) {
			holder := "nobody holds it"
			if s.Master != nil {
				holder = fmt.Sprintf("%s holds it under term %d", s.Master.NodeID, s.Master.Term)
			}
			warnings = append(warnings, fmt.Sprintf("%s has role master in the registry (term %d) but does not hold the lock: %s", p.Info.ProcessID, p.Info.Term, holder))
		}
		if p.Age > r.processTTL {
			warnings = append(warnings, fmt.Sprintf("%s: last heartbeat %s ago, older than the process TTL %s (its clock is behind the server's, or its TTL is longer than -process-ttl)",
				p.Info.ProcessID, FormatAge(p.Age), FormatAge(r.processTTL)))
		}
	}
	s.Warnings = append(warnings, corrupt...)

	// The lock again: a hand-over between the two checks makes the
	// comparison above meaningless.
	again, err := rdb.Check(ctx, c, k)
	if err != nil {
		return Snapshot{}, false, Classify("check the lock "+k.Master, err)
	}
	stable := again.Exists == st.Exists && again.NodeID == st.NodeID && again.Term == st.Term
	return s, stable, nil
}

// termTime returns the acquisition time a term stands for: terms are minted
// as the server's time in ms (or the previous term + 1 within the same
// millisecond). ok is false for a term that is no such time: from before
// 2001 or after now plus a second.
func termTime(term int64, now time.Time) (time.Time, bool) {
	const earliest = 1_000_000_000_000 // 2001-09-09, in ms since the epoch
	t := time.UnixMilli(term)
	if term < earliest || t.After(now.Add(time.Second)) {
		return time.Time{}, false
	}
	return t, true
}

// MaxLockNames is the most lock names Locks returns (and item set names
// AssignSets returns).
const MaxLockNames = 20

// scanBudget bounds how many keys Locks and AssignSets look at on each
// server.
const scanBudget = 100_000

// Locks returns the lock names of the herds on the server, found by SCAN
// for keys of the form of a term key (keyspace.TermKeyPattern) that hold
// strings, sorted; at most MaxLockNames, from at most scanBudget keys per
// server. On a Cluster every master is scanned.
func Locks(ctx context.Context, c redis.UniversalClient) ([]string, error) {
	names, err := scanNames(ctx, c, keyspace.TermKeyPattern, "string", keyspace.LockNameOfTermKey)
	if err != nil {
		return nil, Classify("list lock names (SCAN)", err)
	}
	return names, nil
}

// scanNames returns the names that name finds in the keys of type typ that
// match pattern, found by SCAN, sorted; at most MaxLockNames, from at most
// scanBudget keys per server. On a Cluster every master is scanned.
func scanNames(ctx context.Context, c redis.UniversalClient, pattern, typ string, name func(key string) (string, bool)) ([]string, error) {
	found := map[string]bool{}
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for seen := 0; seen < scanBudget; {
			keys, next, err := c.ScanType(ctx, cursor, pattern, 1000, typ).Result()
			if err != nil {
				return err
			}
			seen += 1000
			mu.Lock()
			for _, k := range keys {
				if n, ok := name(k); ok {
					found[n] = true
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				break
			}
		}
		return nil
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(found))
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > MaxLockNames {
		names = names[:MaxLockNames]
	}
	return names, nil
}

// UnknownLock returns the error for a lock name under which nothing exists,
// naming the lock names found on the server instead.
func UnknownLock(ctx context.Context, conn *Conn) error {
	names, err := Locks(ctx, conn.Client)
	var hint string
	switch {
	case err != nil:
		hint = fmt.Sprintf("the lock names on the server could not be listed: %v", err)
	case len(names) == 0:
		hint = "no lock name on the server looks like herd's (no key matches " + keyspace.TermKeyPattern + ")"
	default:
		hint = "lock names on the server that look like herd's: " + strings.Join(names, ", ")
		if len(names) == MaxLockNames {
			hint += ", …"
		}
	}
	return fmt.Errorf("%w %q: nothing is registered under it on %s (no term, no master, no process); %s",
		ErrUnknownLock, conn.Lock, conn.URL, hint)
}

// MarshalJSON writes the status form of the snapshot, exactly these members:
// lock, backend, on a Cluster slot and slotNode, master (nodeId, identifier,
// term, heldMs, ttlMs; null when nobody holds the lock), processes (each
// entry as stored plus ageMs) and warnings.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	type master struct {
		NodeID     string `json:"nodeId"`
		Identifier string `json:"identifier"`
		Term       int64  `json:"term"`
		HeldMs     int64  `json:"heldMs"`
		TTLMs      int64  `json:"ttlMs"`
	}
	out := struct {
		Lock      string          `json:"lock"`
		Backend   string          `json:"backend"`
		Slot      *int            `json:"slot,omitempty"`
		SlotNode  string          `json:"slotNode,omitempty"`
		Master    *master         `json:"master"`
		Processes json.RawMessage `json:"processes"`
		Warnings  []string        `json:"warnings"`
	}{Lock: s.Lock, Backend: string(s.Backend), SlotNode: s.SlotNode, Warnings: s.Warnings}
	if s.Cluster {
		out.Slot = &s.Slot
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	if m := s.Master; m != nil {
		out.Master = &master{NodeID: m.NodeID, Identifier: m.Identifier, Term: m.Term,
			HeldMs: ms(m.Held), TTLMs: ms(m.TTL)}
	}
	procs, err := ProcessesJSON(s.Processes)
	if err != nil {
		return nil, err
	}
	out.Processes = procs
	return json.Marshal(out)
}

// ProcessesJSON returns ps as a JSON array: each entry's ProcessInfo JSON
// with an "ageMs" member added.
func ProcessesJSON(ps []Process) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		j, err := p.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b.Write(j)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// MarshalJSON writes the entry's ProcessInfo JSON with an "ageMs" member
// added at its end.
func (p Process) MarshalJSON() ([]byte, error) {
	j, err := json.Marshal(p.Info)
	if err != nil {
		return nil, err
	}
	if len(j) < 2 || j[len(j)-1] != '}' {
		return nil, fmt.Errorf("process %q: JSON %.40q is not an object", p.Info.ProcessID, j)
	}
	j = j[:len(j)-1]
	if len(j) > 1 {
		j = append(j, ',')
	}
	return fmt.Appendf(j, `"ageMs":%d}`, p.Age.Milliseconds()), nil
}

// ms is d in whole milliseconds; negative durations (unknown, no expiry)
// stay -1.
func ms(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}
