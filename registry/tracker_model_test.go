package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/keyspace"
)

// The model test drives one SlaveTracker step by step (a batch of notices,
// a sweep) between random operations on a registry in miniredis, on a fake
// clock, and checks every callback against a reference model of the
// tracker's rules. The registry as Redis holds it is the truth: a slave is
// up while its entry is present, has role slave and a lastSeen at most
// SlaveTimeout old; it is down otherwise (absent, master, or stale).
//
//   - Exactly once: per run, a slave's callbacks alternate join, leave,
//     join, ..., starting with a join; the tracker's own entry never has one.
//   - No false join: a slave is reported joined only if it was up at some
//     instant since its previous callback (or since the run began).
//   - No false leave: a slave is reported left only if it was down at some
//     instant since it was reported joined; none for a slave whose entry
//     stayed fresh.
//   - Notices are fast: once the latest write of a slave is announced and
//     delivered, the tracker agrees with it by the end of that step (joined
//     when it registered as a live slave, left when it unregistered or
//     became master).
//   - Convergence: after every notice is delivered and the clock has moved
//     past SlaveTimeout with the live processes heartbeating, the slaves
//     reported joined and not left are exactly the slaves that are up.
//   - Forged notices (published by a client that writes no key) never
//     produce a callback on their own, and one that contradicts the
//     registry is reported to OnError, at most once. No other notice and no
//     sweep reports an error.
//
// HERD_TRACKER_SEED=<n> replays one seed; HERD_TRACKER_SEEDS=<n> runs n
// seeds per mode (default modelSeeds).
func TestTrackerModel(t *testing.T) {
	seeds := make([]uint64, 0, modelSeeds)
	if s := os.Getenv("HERD_TRACKER_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HERD_TRACKER_SEED=%q: %v", s, err)
		}
		seeds = append(seeds, n)
	} else {
		count := modelSeeds
		if s := os.Getenv("HERD_TRACKER_SEEDS"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				t.Fatalf("HERD_TRACKER_SEEDS=%q is not a positive number", s)
			}
			count = n
		}
		base := uint64(time.Now().UnixNano())
		for i := range count {
			seeds = append(seeds, base+uint64(i))
		}
	}
	for _, forge := range []bool{false, true} {
		mode := "honest"
		if forge {
			mode = "forged"
		}
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			failed := 0
			for _, seed := range seeds {
				if msg := runModel(t, seed, forge); msg != "" {
					failed++
					if failed == 1 {
						t.Errorf("seed %d: %s\nreplay: HERD_TRACKER_SEED=%d go test -count=1 -run 'TestTrackerModel/%s' ./registry/", seed, msg, seed, mode)
					}
				}
			}
			if failed > 0 {
				t.Errorf("%d of %d seeds failed", failed, len(seeds))
			}
		})
	}
}

// modelSeeds is how many random scenarios each mode plays by default.
const modelSeeds = 8

// The shape of one scenario.
const (
	modelSteps   = 120
	modelTimeout = 15 * time.Second // SlaveTimeout
	modelTTL     = 40 * time.Second // ProcessTTL
	modelSelf    = "m"              // the tracker's own process, the master
)

// modelIDs are the slaves of a scenario; ghosts are ids only forged notices name.
var (
	modelIDs    = []string{"s0", "s1", "s2", "s3"}
	modelGhosts = []string{"g0", "g1"}
)

// modelNotice is a message of the registry events channel, captured and not
// yet delivered to the tracker.
type modelNotice struct {
	payload []byte
	event   string // "registered", "unregistered", or "" when not a notice
	id      string
	role    string
	reason  string
	write   int    // the writes of id counted when it was published
	forged  bool   // published by the test's forger
	claim   string // the version a forged notice carries: "none", "huge", "next" or "low"
}

// flags records what a slave was since its last callback.
type flags struct{ up, down bool }

// modelRun is one scenario.
type modelRun struct {
	rng   *rand.Rand
	forge bool
	ctx   context.Context
	mr    *miniredis.Miniredis
	c     *redis.Client
	keys  keyspace.Keys
	clk   *clock.Fake
	reg   *Registry
	drv   *modelDriver
	sub   *redis.PubSub
	emu   bool

	pending []modelNotice
	barrier int
	now     map[string]string // the states of the ids as last read
	term    int64

	known   map[string]bool   // joined and not left, from the callbacks
	since   map[string]*flags // per id, since its last callback
	writes  map[string]int    // per id, registry writes (by the test, or announced)
	owned   map[string]bool   // registered through reg and not unregistered
	events  []string          // callbacks of the current step
	errs    []error           // OnError calls of the current step
	trace   []string
	failure string
}

func runModel(t *testing.T, seed uint64, forge bool) (failure string) {
	t.Helper()
	m := &modelRun{
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), forge: forge,
		known: map[string]bool{}, since: map[string]*flags{}, writes: map[string]int{}, owned: map[string]bool{},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m.ctx = ctx
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	mr.SetTime(start)
	mr.ClockTTL(true)
	m.mr, m.clk = mr, clock.NewFake(start)
	m.c = redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer m.c.Close()
	m.keys = keyspace.NewKeys("model", false)
	m.emu = seed%2 == 1
	backend := BackendNative
	if m.emu {
		backend = BackendEmulated
	}
	var err error
	m.reg, err = New(clock.With(ctx, m.clk), m.c, m.keys, Config{ProcessTTL: modelTTL, Backend: backend})
	if err != nil {
		t.Fatal(err)
	}
	m.sub = m.c.Subscribe(ctx, m.keys.RegistryEvents)
	defer m.sub.Close()
	if _, err := m.sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	tr, err := NewSlaveTracker(m.reg, TrackerConfig{
		SlaveTimeout: modelTimeout, SweepInterval: time.Hour, Self: modelSelf,
		OnJoin:  func(n SlaveNode) { m.events = append(m.events, "join:"+n.NodeID) },
		OnLeave: func(id string, _ LeaveReason) { m.events = append(m.events, "leave:"+id) },
		OnError: func(err error) { m.errs = append(m.errs, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	m.drv = newModelDriver(tr)
	for _, id := range append(append([]string{modelSelf}, modelIDs...), modelGhosts...) {
		m.since[id] = &flags{}
	}
	defer func() {
		if failure != "" {
			tail := m.trace
			if len(tail) > 60 {
				tail = tail[len(tail)-60:]
			}
			failure += fmt.Sprintf(" (backend %s)\nlast steps:\n  %s", backend, strings.Join(tail, "\n  "))
		}
	}()

	// The master registers itself, some slaves exist before the run.
	m.promote(modelSelf)
	for _, id := range modelIDs {
		if m.rng.IntN(2) == 0 {
			m.register(id)
		}
	}
	m.capture(false)
	m.pending = nil // announced before the tracker subscribed
	m.mark()
	m.step("first sweep", func() { m.drv.sweep(ctx) }, nil)

	for i := 0; i < modelSteps && m.failure == ""; i++ {
		m.random()
	}
	if m.failure == "" {
		m.converge()
	}
	return m.failure
}

// random plays one random step.
func (m *modelRun) random() {
	id := modelIDs[m.rng.IntN(len(modelIDs))]
	switch r := m.rng.IntN(100); {
	case r < 18:
		m.register(id)
	case r < 30:
		if m.owned[id] {
			m.heartbeat(id)
		}
		if m.rng.IntN(3) == 0 {
			m.heartbeat(modelSelf)
		}
	case r < 40:
		m.unregister(id)
	case r < 48:
		m.promote(id)
	case r < 54:
		d := time.Duration(m.rng.Int64N(int64(modelTimeout / 2)))
		m.advance(d)
	case r < 68:
		m.deliver(1 + m.rng.IntN(4))
	case r < 71:
		m.drop()
	case r < 87:
		m.step("sweep", func() { m.drv.sweep(m.ctx) }, nil)
	case r < 88:
		m.dataLoss()
	default:
		if m.forge {
			m.forgeNotice()
		} else {
			m.deliver(len(m.pending))
		}
	}
}

// converge delivers everything, keeps the owned processes heartbeating
// while more than SlaveTimeout passes, and checks that the tracker ends with
// exactly the live slaves.
func (m *modelRun) converge() {
	m.trace = append(m.trace, "-- converge")
	m.deliver(len(m.pending))
	for range 5 {
		m.advance(modelTimeout / 4)
		for _, id := range append([]string{modelSelf}, modelIDs...) {
			if m.owned[id] {
				m.heartbeat(id)
			}
		}
		m.deliver(len(m.pending))
		m.step("sweep", func() { m.drv.sweep(m.ctx) }, nil)
	}
	m.deliver(len(m.pending))
	m.step("sweep", func() { m.drv.sweep(m.ctx) }, nil)
	m.deliver(len(m.pending))
	if m.failure != "" {
		return
	}
	var up, joined []string
	now := m.now
	for _, id := range modelIDs {
		if now[id] == "up" {
			up = append(up, id)
		}
		if m.known[id] {
			joined = append(joined, id)
		}
	}
	if !slices.Equal(up, joined) {
		m.fail("after convergence the tracker has %v joined, the live slaves are %v", joined, up)
	}
}

func (m *modelRun) fail(format string, args ...any) {
	if m.failure == "" {
		m.failure = fmt.Sprintf(format, args...)
		m.trace = append(m.trace, "!! "+m.failure)
	}
}

// read queues on pipe the reads truths needs.
func (m *modelRun) read(pipe redis.Pipeliner) func() map[string]string {
	all := pipe.HGetAll(m.ctx, m.keys.Processes)
	deadlines := pipe.ZRangeWithScores(m.ctx, m.keys.ProcessesExpiry, 0, -1)
	return func() map[string]string {
		expired := map[string]bool{}
		if m.emu {
			for _, z := range deadlines.Val() {
				if int64(z.Score) <= m.clk.Now().UnixMilli() {
					expired[z.Member.(string)] = true
				}
			}
		}
		out := make(map[string]string, len(m.since))
		for id := range m.since {
			raw, ok := all.Val()[id]
			if !ok || expired[id] {
				out[id] = "absent"
				continue
			}
			p, err := decodeProcess(id, raw)
			switch {
			case err != nil:
				m.fail("entry of %s does not decode: %v", id, err)
				out[id] = "absent"
			case p.Role == RoleMaster:
				out[id] = "master"
			case m.clk.Now().Sub(p.LastSeen) > modelTimeout:
				out[id] = "stale"
			default:
				out[id] = "up"
			}
		}
		return out
	}
}

// truths reads what the registry holds now for every id, without side
// effects: "absent", "master", "stale" or "up".
func (m *modelRun) truths() map[string]string {
	pipe := m.c.Pipeline()
	states := m.read(pipe)
	if _, err := pipe.Exec(m.ctx); err != nil && err != redis.Nil {
		m.fail("read the registry: %v", err)
	}
	m.now = states()
	return m.now
}

// mark records the states of the ids, as last read, into their flags and
// returns them.
func (m *modelRun) mark() map[string]string {
	for id, f := range m.since {
		if m.now[id] == "up" {
			f.up = true
		} else {
			f.down = true
		}
	}
	return m.now
}

// op runs a registry operation of the test and captures its notices.
func (m *modelRun) op(desc string, fn func() error) {
	if err := fn(); err != nil && !isFenced(err) {
		m.fail("%s: %v", desc, err)
	}
	m.trace = append(m.trace, desc)
	m.capture(false)
	m.mark()
}

func (m *modelRun) register(id string) {
	m.writes[id]++
	m.owned[id] = true
	m.op("register "+id, func() error { return m.reg.Register(m.ctx, slave(id)) })
}

func (m *modelRun) heartbeat(id string) {
	m.writes[id]++
	m.op("heartbeat "+id, func() error { return m.reg.Heartbeat(m.ctx, id) })
}

func (m *modelRun) unregister(id string) {
	m.writes[id]++
	delete(m.owned, id)
	m.op("unregister "+id, func() error { return m.reg.Unregister(m.ctx, id) })
}

// promote makes id the holder of the lock under a new term and registers it
// as master.
func (m *modelRun) promote(id string) {
	m.term++
	m.writes[id]++
	m.owned[id] = true
	m.op(fmt.Sprintf("promote %s (term %d)", id, m.term), func() error {
		if err := m.c.Set(m.ctx, m.keys.Master, id, 0).Err(); err != nil {
			return err
		}
		if err := m.c.Set(m.ctx, m.keys.Term, m.term, 0).Err(); err != nil {
			return err
		}
		return m.reg.Register(m.ctx, ProcessInfo{ProcessID: id, Role: RoleMaster, Term: m.term})
	})
}

func (m *modelRun) advance(d time.Duration) {
	m.mr.SetTime(m.clk.Now().Add(d))
	m.clk.Advance(d)
	m.trace = append(m.trace, "advance "+d.Round(time.Millisecond).String())
	m.truths()
	m.mark()
}

// dataLoss empties Redis, as a restart without persistence does; the
// restart takes a second.
func (m *modelRun) dataLoss() {
	m.mr.FlushAll()
	m.trace = append(m.trace, "data loss")
	m.advance(time.Second)
	// The lock is gone too: the master takes it again.
	m.promote(modelSelf)
}

// drop loses a notice in transit.
func (m *modelRun) drop() {
	if len(m.pending) == 0 {
		return
	}
	i := m.rng.IntN(len(m.pending))
	m.trace = append(m.trace, "lose "+describe(m.pending[i]))
	m.pending = slices.Delete(m.pending, i, i+1)
}

// capture reads the events channel up to a barrier of the test's own, so
// that every notice published so far is queued in pending, and reads the
// states of the ids. byTracker tells
// that the tracker's step published them (stale removals, expiries): each
// is a write of its id the test did not count yet.
func (m *modelRun) capture(byTracker bool) {
	m.barrier++
	mark := fmt.Sprintf("barrier %d", m.barrier)
	pipe := m.c.Pipeline()
	pipe.Publish(m.ctx, m.keys.RegistryEvents, mark)
	states := m.read(pipe)
	if _, err := pipe.Exec(m.ctx); err != nil && err != redis.Nil {
		m.fail("publish barrier: %v", err)
		return
	}
	m.now = states()
	for {
		msg, err := m.sub.ReceiveMessage(m.ctx)
		if err != nil {
			m.fail("receive: %v", err)
			return
		}
		if msg.Payload == mark {
			break
		}
		n := parseModelNotice([]byte(msg.Payload))
		if n.id != "" {
			if byTracker {
				m.writes[n.id]++
			}
			n.write = m.writes[n.id]
		}
		m.pending = append(m.pending, n)
	}
}

func parseModelNotice(b []byte) modelNotice {
	var v struct {
		Event  string `json:"event"`
		NodeID string `json:"nodeId"`
		Role   string `json:"role"`
		Reason string `json:"reason"`
	}
	n := modelNotice{payload: b}
	if json.Unmarshal(b, &v) == nil {
		n.event, n.id, n.role, n.reason = v.Event, v.NodeID, v.Role, v.Reason
	}
	return n
}

func describe(n modelNotice) string {
	s := string(n.payload)
	if len(s) > 90 {
		s = s[:90] + "…"
	}
	if n.forged {
		return "forged(" + n.claim + ") " + s
	}
	return fmt.Sprintf("%s (write %d)", s, n.write)
}

// deliver hands the next k pending notices to the tracker as one batch.
func (m *modelRun) deliver(k int) {
	k = min(k, len(m.pending))
	if k == 0 {
		return
	}
	batch := slices.Clone(m.pending[:k])
	m.pending = m.pending[k:]
	descs := make([]string, len(batch))
	payloads := make([][]byte, len(batch))
	for i, n := range batch {
		descs[i], payloads[i] = describe(n), n.payload
	}
	m.step("deliver "+strings.Join(descs, " | "), func() { m.drv.notices(m.ctx, payloads) }, batch)
}

// step runs one step of the tracker and checks its callbacks.
func (m *modelRun) step(desc string, run func(), batch []modelNotice) {
	before := m.mark()
	m.events, m.errs = nil, nil
	run()
	m.trace = append(m.trace, desc)
	if len(m.events) > 0 {
		m.trace = append(m.trace, "   -> "+strings.Join(m.events, " "))
	}
	for _, err := range m.errs {
		m.trace = append(m.trace, "   -> error: "+err.Error())
	}
	for _, ev := range m.events {
		kind, id, _ := strings.Cut(ev, ":")
		f := m.since[id]
		switch {
		case id == modelSelf:
			m.fail("%s: the tracker's own process was reported", ev)
		case f == nil:
			m.fail("%s: an id no process has", ev)
		case kind == "join" && m.known[id]:
			m.fail("%s: reported joined twice without a leave", ev)
		case kind == "join" && !f.up:
			m.fail("%s: joined, but it was not a live slave at any instant since its last callback", ev)
		case kind == "leave" && !m.known[id]:
			m.fail("%s: reported left without being joined", ev)
		case kind == "leave" && !f.down:
			m.fail("%s: left, but its entry stayed a live slave since it joined (its heartbeats kept arriving)", ev)
		}
		if m.failure != "" {
			return
		}
		m.known[id] = kind == "join"
		*f = flags{}
		if before[id] == "up" {
			f.up = true
		} else if before[id] != "" {
			f.down = true
		}
	}
	m.capture(true) // the step's own writes (stale removals, expiries)
	after := m.mark()
	forged := 0
	for _, n := range batch {
		if n.forged {
			forged++
		}
	}
	if len(m.errs) > forged {
		m.fail("%d errors reported for %d forged notices (each is reported at most once, an honest one never): %v", len(m.errs), forged, m.errs[0])
	}
	m.checkPrompt(batch, before, after)
}

// checkPrompt checks that the latest write of a slave, announced and
// delivered in batch, is what the tracker believes after the step, and that
// a forged notice contradicting the registry was reported.
func (m *modelRun) checkPrompt(batch []modelNotice, before, after map[string]string) {
	contradicted := 0
	for _, n := range batch {
		if n.forged {
			if n.event == "unregistered" && before[n.id] == "up" && (n.claim == "none" || n.claim == "huge") {
				contradicted++
			}
			continue
		}
		if n.id == "" || n.id == modelSelf || n.write != m.writes[n.id] || n.reason == keyspace.ReasonExpired {
			continue
		}
		switch {
		case n.event == "registered" && n.role == "slave" && before[n.id] == "up" && after[n.id] == "up" && !m.known[n.id]:
			m.fail("delivered %s, the slave's latest write, and it is live, but the tracker has not reported it joined", describe(n))
		case n.event == "registered" && n.role == "master" && before[n.id] == "master" && m.known[n.id]:
			m.fail("delivered %s, the process's latest write, and it is master, but the tracker still has it as a slave", describe(n))
		case n.event == "unregistered" && before[n.id] == "absent" && m.known[n.id]:
			m.fail("delivered %s, the slave's latest write, and it is gone, but the tracker still has it joined", describe(n))
		}
	}
	if m.failure == "" && contradicted > 0 && len(m.errs) == 0 {
		m.fail("delivered %d forged unregistered notices for live slaves, and none was reported to OnError", contradicted)
	}
}

// forgeNotice queues a notice no registry write made, as a client with
// PUBLISH rights could send it.
func (m *modelRun) forgeNotice() {
	ids := append(slices.Clone(modelIDs), modelGhosts...)
	id := ids[m.rng.IntN(len(ids))]
	claim, version := m.forgedVersion()
	var payload string
	switch m.rng.IntN(5) {
	case 0, 1:
		payload = `{"event":"unregistered","nodeId":"` + id + `"` + version + `}`
	case 2, 3:
		now := m.clk.Now().UTC().Format(wire.TimeLayout)
		payload = `{"event":"registered","nodeId":"` + id + `","role":"slave"` + version +
			`,"process":{"processId":"` + id + `","nodeId":"` + id + `","role":"slave","lastSeen":"` + now + `"}}`
	default:
		payload = `{"event":"registered","nodeId":"` + id + `","role":"master"` + version +
			`,"process":{"processId":"` + id + `","role":"master","term":99}}`
	}
	n := parseModelNotice([]byte(payload))
	n.forged, n.claim = true, claim
	at := m.rng.IntN(len(m.pending) + 1)
	m.pending = slices.Insert(m.pending, at, n)
	m.trace = append(m.trace, fmt.Sprintf("forge at %d: %s", at, describe(n)))
}

// forgedVersion returns the version member of a forged notice: none, a huge
// one, one just above or below the registry's latest.
func (m *modelRun) forgedVersion() (claim, member string) {
	latest, _ := m.c.Get(m.ctx, m.keys.ProcessesVersion).Int64()
	switch m.rng.IntN(4) {
	case 0:
		return "none", ""
	case 1:
		return "huge", `,"version":9000000000000000`
	case 2:
		return "next", fmt.Sprintf(`,"version":%d`, latest+1)
	}
	return "low", fmt.Sprintf(`,"version":%d`, max(latest-1, 1))
}

// modelDriver runs the steps of one tracker run for TestTrackerModel
// without Run's goroutine, so a seed replays exactly.
type modelDriver struct{ s *trackerState }

func newModelDriver(tr *SlaveTracker) *modelDriver {
	return &modelDriver{s: newTrackerState(tr)}
}

// notices handles a batch of notices as Run does.
func (d *modelDriver) notices(ctx context.Context, payloads [][]byte) { d.s.notices(ctx, payloads) }

// sweep runs one sweep as Run does.
func (d *modelDriver) sweep(ctx context.Context) { d.s.sweep(ctx) }

// isFenced reports whether err is a master write that the registry refused
// and wrote as a slave instead.
func isFenced(err error) bool { return errors.Is(err, ErrNotMaster) }
