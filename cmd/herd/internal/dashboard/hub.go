package dashboard

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/operate"
	"github.com/herdkit/herd/registry"
)

// hub keeps the page's model, built from the watcher's updates, and hands
// it to every open page. It is safe for concurrent use.
type hub struct {
	conn     *operate.Conn
	opts     Options
	interval time.Duration

	mu          sync.Mutex
	snap        operate.Snapshot
	haveSnap    bool
	readAt      time.Time // local time of the last update
	failing     string    // the last read's error; "" when it succeeded
	events      []operate.Event
	masterships []mastership
	failovers   int           // failovers seen
	lastGap     time.Duration // the gap of the last failover
	encoded     []byte        // the model as JSON, as of the last update
	subs        map[chan []byte]struct{}
}

// mastership is one bar of the page's timeline.
type mastership struct {
	NodeID     string `json:"nodeId"`
	Identifier string `json:"identifier,omitempty"`
	Term       int64  `json:"term"`
	StartMs    int64  `json:"startMs"`         // server clock; 0 when unknown
	EndMs      int64  `json:"endMs,omitempty"` // server clock; 0 while it lasts
	End        string `json:"end,omitempty"`   // released, expired, unannounced
	GapMs      *int64 `json:"gapMs,omitempty"` // the failover after it
	GapAtMost  bool   `json:"gapAtMost,omitempty"`
	Successor  string `json:"successor,omitempty"`
}

func newHub(conn *operate.Conn, o Options, interval time.Duration) *hub {
	return &hub{conn: conn, opts: o, interval: interval, subs: map[chan []byte]struct{}{}}
}

// update takes one update of the watcher.
func (h *hub) update(u operate.Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readAt = time.Now()
	h.snap, h.haveSnap = u.Snapshot, true
	h.failing = ""
	if u.Err != nil {
		h.failing = u.Err.Error()
	}
	for _, e := range u.Events {
		h.apply(e, u.Snapshot)
	}
	h.events = append(h.events, u.Events...)
	if over := len(h.events) - h.opts.Events; over > 0 {
		h.events = append([]operate.Event(nil), h.events[over:]...)
	}
	if over := len(h.masterships) - h.opts.Masterships; over > 0 {
		h.masterships = append([]mastership(nil), h.masterships[over:]...)
	}
	b, err := json.Marshal(h.modelLocked())
	if err != nil {
		return
	}
	h.encoded = b
	for ch := range h.subs {
		select {
		case <-ch: // a slow page gets the latest model, not every one
		default:
		}
		ch <- b
	}
}

// apply adds an event to the timeline and the counters.
func (h *hub) apply(e operate.Event, s operate.Snapshot) {
	at := e.At
	if at.IsZero() {
		at = s.Time
	}
	switch e.Kind {
	case operate.EventState:
		if m := s.Master; m != nil && len(h.masterships) == 0 {
			start := m.Since
			if start.IsZero() && m.Held >= 0 {
				start = s.Time.Add(-m.Held)
			}
			h.masterships = append(h.masterships, mastership{NodeID: m.NodeID, Identifier: m.Identifier, Term: m.Term, StartMs: millis(start)})
		}
	case operate.EventAcquired:
		h.masterships = append(h.masterships, mastership{NodeID: e.NodeID, Identifier: e.Identifier, Term: e.Term, StartMs: millis(at)})
	case operate.EventReleased, operate.EventExpired:
		if m := h.find(e.NodeID, e.Term); m != nil {
			m.EndMs, m.End = millis(at), string(e.Kind)
			if e.Reason == "unannounced" {
				m.End = e.Reason
			}
		}
	case operate.EventFailover:
		h.failovers++
		h.lastGap = e.Gap
		if m := h.find(e.From, e.FromTerm); m != nil {
			gap := e.Gap.Milliseconds()
			m.GapMs, m.GapAtMost, m.Successor = &gap, e.GapAtMost, e.NodeID
		}
	}
}

// find returns the mastership of node under term, nil when the timeline
// does not have it.
func (h *hub) find(node string, term int64) *mastership {
	for i := len(h.masterships) - 1; i >= 0; i-- {
		if m := &h.masterships[i]; m.NodeID == node && m.Term == term {
			return m
		}
	}
	return nil
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// model is what the page renders: everything, every time, so that a page
// that missed an update needs nothing else.
type model struct {
	Lock          string            `json:"lock"`
	URL           string            `json:"url"`
	Backend       string            `json:"backend"`
	AllowStepDown bool              `json:"allowStepDown"`
	IntervalMs    int64             `json:"intervalMs"`
	ProcessTTLMs  int64             `json:"processTtlMs"`
	ServerTimeMs  int64             `json:"serverTimeMs"`
	Error         string            `json:"error,omitempty"`
	Master        *masterModel      `json:"master"`
	Processes     json.RawMessage   `json:"processes"`
	Warnings      []string          `json:"warnings"`
	Masterships   []mastership      `json:"masterships"`
	Events        []json.RawMessage `json:"events"`
	Failovers     int               `json:"failovers"`
	// DeadLetters is the number of dead letters of durable routing; null
	// when it could not be read, then DeadLettersError says why.
	DeadLetters      *int64 `json:"deadLetters"`
	DeadLettersError string `json:"deadLettersError,omitempty"`
	// Assignments summarize the watched item sets of package assign.
	Assignments []operate.AssignSummary `json:"assignments"`
}

type masterModel struct {
	NodeID     string `json:"nodeId"`
	Identifier string `json:"identifier"`
	Term       int64  `json:"term"`
	SinceMs    int64  `json:"sinceMs"`
	HeldMs     int64  `json:"heldMs"`
	TTLMs      int64  `json:"ttlMs"`
}

// eventModel is an event with the line herd watch prints for it.
type eventModel struct {
	operate.Event
}

func (e eventModel) MarshalJSON() ([]byte, error) {
	b, err := e.Event.MarshalJSON()
	if err != nil {
		return nil, err
	}
	text, err := json.Marshal(e.Text())
	if err != nil {
		return nil, err
	}
	return append(append(append(b[:len(b)-1], `,"text":`...), text...), '}'), nil
}

func (h *hub) modelLocked() model {
	s := h.snap
	m := model{
		Lock: h.conn.Lock, URL: h.conn.URL, Backend: string(s.Backend), AllowStepDown: h.opts.AllowStepDown,
		IntervalMs: h.interval.Milliseconds(), ProcessTTLMs: s.ProcessTTL.Milliseconds(),
		ServerTimeMs: millis(s.Time), Error: h.failing, Warnings: s.Warnings, Masterships: h.masterships,
		Failovers: h.failovers,
	}
	if m.Warnings == nil {
		m.Warnings = []string{}
	}
	if m.Masterships == nil {
		m.Masterships = []mastership{}
	}
	m.Assignments = s.Assignments
	if m.Assignments == nil {
		m.Assignments = []operate.AssignSummary{}
	}
	if s.DeadLetters >= 0 {
		n := s.DeadLetters
		m.DeadLetters = &n
	} else {
		m.DeadLettersError = s.DeadLettersError
	}
	if ms := s.Master; ms != nil {
		m.Master = &masterModel{NodeID: ms.NodeID, Identifier: ms.Identifier, Term: ms.Term,
			SinceMs: millis(ms.Since), HeldMs: ms.Held.Milliseconds(), TTLMs: ms.TTL.Milliseconds()}
	}
	m.Processes, _ = operate.ProcessesJSON(s.Processes)
	if m.Processes == nil {
		m.Processes = json.RawMessage("[]")
	}
	m.Events = make([]json.RawMessage, 0, len(h.events))
	for _, e := range h.events {
		if b, err := (eventModel{e}).MarshalJSON(); err == nil {
			m.Events = append(m.Events, b)
		}
	}
	return m
}

// subscribe returns a channel that receives the model now (when there is
// one) and after every update, and the function that ends the
// subscription.
func (h *hub) subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	if h.encoded != nil {
		ch <- h.encoded
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// snapshot returns the last snapshot read, and false before the first.
func (h *hub) snapshot() (operate.Snapshot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snap, h.haveSnap
}

// health reports whether the last read succeeded and is recent, how old
// it is, and what failed.
func (h *hub) health() (ok bool, age time.Duration, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.haveSnap {
		return false, 0, "no read of Redis yet"
	}
	age = time.Since(h.readAt)
	switch {
	case h.failing != "":
		return false, age, h.failing
	case age > 3*h.interval+5*time.Second:
		return false, age, "the last read of Redis is " + age.Round(time.Millisecond).String() + " old"
	}
	return true, age, ""
}

// gauges is what /metrics reports, read under the hub's lock.
type gauges struct {
	up, hasMaster bool
	term          int64
	held          time.Duration
	byRole        map[registry.Role]int
	warnings      int
	failovers     int
	lastGap       time.Duration
	deadLetters   int64 // -1: unknown
}

func (h *hub) gauges() (gauges, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.haveSnap {
		return gauges{}, false
	}
	g := gauges{up: h.failing == "", byRole: map[registry.Role]int{registry.RoleMaster: 0, registry.RoleSlave: 0},
		warnings: len(h.snap.Warnings), failovers: h.failovers, lastGap: h.lastGap, deadLetters: h.snap.DeadLetters}
	if m := h.snap.Master; m != nil {
		g.hasMaster, g.term, g.held = true, m.Term, m.Held
	}
	for _, p := range h.snap.Processes {
		g.byRole[p.Info.Role]++
	}
	return g, true
}
