package registry

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/keyspace"
)

// Processes returns every live entry, sorted by process id; the
// specification's getAllProcesses. Corrupt entries are skipped and reported
// to Config.OnError.
func (r *Registry) Processes(ctx context.Context) ([]ProcessInfo, error) {
	snap, err := r.load(ctx, false)
	return snap.infos, err
}

// Process returns the live entry of processID, ErrNotFound when there is
// none, or an error wrapping ErrCorruptEntry when it cannot be read.
func (r *Registry) Process(ctx context.Context, processID string) (ProcessInfo, error) {
	p, _, err := r.entry(ctx, processID)
	return p, err
}

// entry reads the live entry of processID and, in the same round trip, the
// node id of the lock's holder ("" when none): the read of Process and
// Slave, with their errors.
func (r *Registry) entry(ctx context.Context, processID string) (_ ProcessInfo, master string, _ error) {
	if err := keyspace.ValidateName("process id", processID); err != nil {
		return ProcessInfo{}, "", fmt.Errorf("%w: %w", ErrInvalidProcess, err)
	}
	view, err := r.be.read(ctx, []string{processID}, false)
	if err != nil {
		return ProcessInfo{}, "", fmt.Errorf("read process %q: %w", processID, err)
	}
	raw, ok := view.Entries[processID]
	if !ok {
		return ProcessInfo{}, "", fmt.Errorf("process %q: %w", processID, ErrNotFound)
	}
	p, err := decodeProcess(processID, raw)
	if err != nil {
		return ProcessInfo{}, "", r.corrupt(processID, err)
	}
	return p, view.Master, nil
}

// ProcessesByRole returns the live entries whose role is role, sorted by
// process id; the specification's getProcessesByRole. RoleSlave leaves out
// the process that holds the master lock at the read (read in the same
// round trip), whatever its entry says: a new master's entry still says
// slave until its first write as master, and a process is never its own
// slave.
func (r *Registry) ProcessesByRole(ctx context.Context, role Role) ([]ProcessInfo, error) {
	if !role.known() {
		return nil, fmt.Errorf("%w: role %q is neither %q nor %q", ErrInvalidProcess, role, RoleMaster, RoleSlave)
	}
	snap, err := r.load(ctx, false)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(snap.infos, func(p ProcessInfo) bool { return !p.listedAs(role, snap.master) }), nil
}

// MasterProcess returns the master's info from Keys.MasterProcess, written
// by the lock scripts with the lock's TTL and a "term" member; the
// specification's getMasterProcess. It returns ErrNotFound when there is no
// master, and an error wrapping ErrCorruptEntry naming the key when the
// value is not a ProcessInfo.
func (r *Registry) MasterProcess(ctx context.Context) (ProcessInfo, error) {
	v, err := r.c.Get(ctx, r.keys.MasterProcess).Result()
	if errors.Is(err, redis.Nil) {
		return ProcessInfo{}, fmt.Errorf("master process: %w", ErrNotFound)
	}
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("read master process: %w", err)
	}
	p, err := decodeProcess("", v)
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("%w: key %q: %w", ErrCorruptEntry, r.keys.MasterProcess, err)
	}
	return p, nil
}

// Slaves returns every live slave, sorted by node id, the lock's holder
// left out as in ProcessesByRole; the specification's getSlaves.
func (r *Registry) Slaves(ctx context.Context) ([]SlaveNode, error) {
	ps, err := r.ProcessesByRole(ctx, RoleSlave)
	if err != nil {
		return nil, err
	}
	out := make([]SlaveNode, len(ps))
	for i, p := range ps {
		out[i] = p.Slave()
	}
	return out, nil
}

// Slave returns the live slave nodeID, or ErrNotFound when there is no live
// entry for it or it is not a slave (its entry says master, or it holds the
// lock); the specification's getSlave.
func (r *Registry) Slave(ctx context.Context, nodeID string) (SlaveNode, error) {
	p, master, err := r.entry(ctx, nodeID)
	if err != nil {
		return SlaveNode{}, err
	}
	switch {
	case p.Role != RoleSlave:
		return SlaveNode{}, fmt.Errorf("slave %q: it is the %s: %w", nodeID, p.Role, ErrNotFound)
	case p.holds(master):
		return SlaveNode{}, fmt.Errorf("slave %q: it holds the master lock: %w", nodeID, ErrNotFound)
	}
	return p.Slave(), nil
}

// SlaveCount returns the number of live slaves; the specification's
// getSlaveCount. It reads the whole registry.
func (r *Registry) SlaveCount(ctx context.Context) (int, error) {
	ps, err := r.ProcessesByRole(ctx, RoleSlave)
	return len(ps), err
}

// ProcessChannel returns the routing channel of the live process processID,
// "worker:slave:<processID>", or ErrNotFound when it is not registered.
func (r *Registry) ProcessChannel(ctx context.Context, processID string) (string, error) {
	p, err := r.Process(ctx, processID)
	if err != nil {
		return "", err
	}
	return r.keys.SlaveChannel(p.ProcessID), nil
}

// snapshot is what load read: the decoded entries, sorted by process id,
// the raw value each was decoded from (raws[i] is infos[i]'s), and the
// registry's version as of the read (when asked for).
type snapshot struct {
	infos   []ProcessInfo
	raws    []string
	version int64
	master  string // the lock's holder at the read
}

// load reads every live entry, sorted by process id, skipping and reporting
// corrupt ones. With versioned, the snapshot's version is the registry's
// version as of the read.
func (r *Registry) load(ctx context.Context, versioned bool) (snapshot, error) {
	view, err := r.be.read(ctx, nil, versioned)
	if err != nil {
		return snapshot{}, fmt.Errorf("read registry %q: %w", r.keys.Processes, err)
	}
	if len(view.Removed) > 0 {
		r.cfg.Logger.Debug().Strs("processes", view.Removed).Msg("removed expired registry entries")
	}
	return r.snapshotOf(view), nil
}

// snapshotOf decodes the entries of view, sorted by process id, skipping
// and reporting corrupt ones: load's work after the read.
//
// The ids of a registry change far less often than it is read (a process
// joins or leaves; every read in between sees the same ids), so the sorted
// ids of the last snapshot are kept and tried first: when every one of them
// is in view and there are as many, they are exactly view's ids, in order,
// and no sort is needed.
func (r *Registry) snapshotOf(view rdb.RegistryView) snapshot {
	m := view.Entries
	snap := snapshot{infos: make([]ProcessInfo, len(m)), raws: make([]string, len(m)), version: view.Version, master: view.Master}
	errs := make([]error, len(m))
	fields := r.decodeSorted(m, snap.raws, snap.infos, errs)
	bad := r.dropCorrupt(&snap, fields, errs)
	r.forgetReported(bad)
	return snap
}

// decodeSorted decodes the entries of m in the order of their sorted ids
// (decodeAll), and returns those ids: the ids of the last snapshot when
// they are m's, else m's sorted, which it keeps for the next snapshot.
func (r *Registry) decodeSorted(m map[string]string, raws []string, out []ProcessInfo, errs []error) []string {
	r.mu.Lock()
	fields := r.order
	r.mu.Unlock()
	if len(fields) == len(m) && decodeAll(m, fields, raws, out, errs) {
		return fields
	}
	fields = sortedKeys(m)
	decodeAll(m, fields, raws, out, errs)
	r.mu.Lock()
	r.order = fields // never written again: snapshots may share it
	r.mu.Unlock()
	return fields
}

// dropCorrupt removes from snap the entries whose decoding failed (errs,
// by position in fields), reporting each (reportOnce), and returns the
// fields dropped with the hash of their values.
func (r *Registry) dropCorrupt(snap *snapshot, fields []string, errs []error) (bad map[string]uint64) {
	n := 0
	for i, field := range fields {
		if errs[i] != nil {
			bad = addCorrupt(bad, field, snap.raws[i])
			r.reportOnce(field, bad[field], errs[i])
			continue
		}
		snap.infos[n], snap.raws[n] = snap.infos[i], snap.raws[i]
		n++
	}
	clear(snap.infos[n:]) // no references kept past the end
	snap.infos, snap.raws = snap.infos[:n], snap.raws[:n]
	return bad
}

// addCorrupt records in bad, made when nil (most snapshots have no corrupt
// entry), the hash of raw, the corrupt value of field.
func addCorrupt(bad map[string]uint64, field, raw string) map[string]uint64 {
	if bad == nil {
		bad = map[string]uint64{}
	}
	bad[field] = hashOf(raw)
	return bad
}

// forgetReported forgets the corrupt fields reported before that are not
// in bad, the corrupt fields of the last snapshot: they were fixed or
// removed, and are reported again if they turn corrupt again.
func (r *Registry) forgetReported(bad map[string]uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for f := range r.reported {
		if _, ok := bad[f]; !ok {
			delete(r.reported, f)
		}
	}
}

// decodeChunk is the least number of entries worth a goroutine of their own
// when decoding a large registry.
const decodeChunk = 1024

// decodeAll decodes m[fields[i]] into out[i] or errs[i], keeping the value
// in raws[i]. It returns false, early and with the outputs in an undefined
// state, when a field is not in m. A large registry is decoded on up to
// GOMAXPROCS goroutines, which it waits for.
func decodeAll(m map[string]string, fields, raws []string, out []ProcessInfo, errs []error) bool {
	job := &decodeJob{m: m, fields: fields, raws: raws, out: out, errs: errs}
	parts := min(runtime.GOMAXPROCS(0), len(fields)/decodeChunk)
	if parts < 2 {
		job.decode(0, len(fields))
		return !job.missing.Load()
	}
	var wg sync.WaitGroup
	size := (len(fields) + parts - 1) / parts
	for lo := size; lo < len(fields); lo += size {
		wg.Go(func() { job.decode(lo, min(lo+size, len(fields))) })
	}
	job.decode(0, size)
	wg.Wait()
	return !job.missing.Load()
}

// decodeJob is the work of one decodeAll, shared by its goroutines, each
// decoding a range of positions.
type decodeJob struct {
	m            map[string]string
	fields, raws []string
	out          []ProcessInfo
	errs         []error
	missing      atomic.Bool // a field is not in m: every goroutine stops
}

// decode decodes the entries at positions lo to hi (excluded), and stops
// at a field missing from m, or soon after another goroutine found one.
func (j *decodeJob) decode(lo, hi int) {
	for i := lo; i < hi; i++ {
		raw, ok := j.m[j.fields[i]]
		if !ok {
			j.missing.Store(true)
			return
		}
		if i&63 == 0 && j.missing.Load() {
			return
		}
		j.raws[i] = raw
		j.out[i], j.errs[i] = decodeProcess(j.fields[i], raw)
	}
}

// reportOnce hands the corrupt field to OnError unless the same value of
// the same field has been reported already.
func (r *Registry) reportOnce(field string, h uint64, err error) {
	r.mu.Lock()
	seen, ok := r.reported[field]
	r.reported[field] = h
	r.mu.Unlock()
	if ok && seen == h {
		return
	}
	cerr := r.corrupt(field, err)
	r.cfg.Logger.Warn().Err(cerr).Msg("skipped a corrupt registry entry")
	if r.cfg.OnError != nil {
		r.cfg.OnError(cerr)
	}
}

func (r *Registry) corrupt(field string, err error) error {
	return fmt.Errorf("%w: field %q of %q: %w", ErrCorruptEntry, wire.Truncate(field), r.keys.Processes, err)
}

// entries reads the live entries of ids and the registry's version as of
// the read, atomically, in one round trip. Corrupt entries are left out and
// reported to Config.OnError.
func (r *Registry) entries(ctx context.Context, ids []string) (map[string]ProcessInfo, int64, error) {
	view, err := r.be.read(ctx, ids, true)
	if err != nil {
		return nil, 0, fmt.Errorf("read registry %q: %w", r.keys.Processes, err)
	}
	out := make(map[string]ProcessInfo, len(view.Entries))
	for id, raw := range view.Entries {
		p, err := decodeProcess(id, raw)
		if err != nil {
			r.reportOnce(id, hashOf(raw), err)
			continue
		}
		out[id] = p
	}
	return out, view.Version, nil
}

// hashOf is the FNV-1a hash of s, by which reportOnce knows a corrupt value
// it has reported already.
func hashOf(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
