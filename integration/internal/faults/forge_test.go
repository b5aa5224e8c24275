//go:build linux

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/pubsub"
)

// forger is the FaultForger: a plain go-redis client, no herd, that
// publishes forged messages on herd's channels until it is stopped. Every
// forgery is a KindForgery record saying what it was.
type forger struct {
	c      *cluster
	rng    *rand.Rand // its own: it runs beside the schedule's goroutine
	seq    int64
	master string   // the master's node id when it began
	slaves []string // the other live node ids when it began
	n      int      // forgeries so far, for unique ids
	// registry is set when it forges registry notices too (see
	// schedule.forgeRegistry).
	registry bool
	stop     chan struct{}
	done     chan struct{}
}

// startForger starts the forger of fault seq and returns the function that
// stops it and waits for it.
func (c *cluster) startForger(seq int64, master *process) func() {
	f := &forger{c: c, rng: rand.New(rand.NewPCG(c.rng.Uint64(), uint64(seq))), seq: seq,
		stop: make(chan struct{}), done: make(chan struct{}), registry: c.forgeRegistry}
	for _, p := range c.live() {
		if p == master {
			f.master = p.label
		} else {
			f.slaves = append(f.slaves, p.label)
		}
	}
	go f.run()
	var once sync.Once
	return func() {
		once.Do(func() { close(f.stop) })
		<-f.done
	}
}

func (f *forger) run() {
	defer close(f.done)
	for {
		select {
		case <-f.stop:
			return
		case <-time.After(between(f.rng, 10*time.Millisecond, 60*time.Millisecond)):
		}
		f.forge()
	}
}

// realTerm reads the term key, as any client with read access can.
func (f *forger) realTerm() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	v, err := f.c.admin.Get(ctx, f.c.keys.Term).Int64()
	if err != nil {
		return 0
	}
	return v
}

// term draws a forged term: huge, one above the real one, the real one, or
// below it.
func (f *forger) term(real int64) (int64, string) {
	switch f.rng.IntN(4) {
	case 0:
		return 9_000_000_000_000_000 + f.rng.Int64N(1000), "huge term"
	case 1:
		return real + 1, "real term + 1"
	case 2:
		return max(real, 1), "real term"
	default:
		return max(real-1-f.rng.Int64N(1000), 1), "term below the real one"
	}
}

// node draws a node id to name: the master, a live slave, or a ghost.
func (f *forger) node() string {
	switch k := f.rng.IntN(4); {
	case k == 0 && f.master != "":
		return f.master
	case k <= 2 && len(f.slaves) > 0:
		return f.slaves[f.rng.IntN(len(f.slaves))]
	default:
		return "ghost-" + strconv.Itoa(f.rng.IntN(3))
	}
}

// liveNode draws the id of a process alive when the forger began.
func (f *forger) liveNode() string {
	ids := append([]string{}, f.slaves...)
	if f.master != "" {
		ids = append(ids, f.master)
	}
	if len(ids) == 0 {
		return "ghost-0"
	}
	return ids[f.rng.IntN(len(ids))]
}

// version draws the version member of a forged registry notice.
func (f *forger) version() (string, string) {
	switch f.rng.IntN(3) {
	case 0:
		return "", "no version"
	case 1:
		return `,"version":9000000000000000000`, "huge version"
	default:
		return `,"version":` + strconv.FormatInt(time.Now().UnixMicro()+1_000_000, 10), "version of a second from now"
	}
}

var malformedNotices = []string{
	`{"event":"acquired"`, `not json`, `{"event":"acquired","nodeId":"x","term":"abc","forged":true}`, `[]`,
	`{"event":"released","nodeId":"x","term":-5,"forged":true}`, `{}`, `{"event":"registered","nodeId":"x","process":"x","forged":true}`,
	`{"event":"unregistered","forged":true}`, `{"event":7}`,
}

var malformedEnvelopes = []string{
	`not json`, `{"id":"forged-m1","type":"work","term":"NaN"}`, `{"id":"forged-m2","from":"x","term":-1,"type":"work","payload":{}}`,
	`{}`, `{"id":"forged-m3","from":"x","term":1e400,"type":"work","payload":{"seq":1}}`, `{"id":"forged-m4","type":"nope","term":1,"from":"x","payload":null}`,
}

// forge publishes one forgery and records it.
func (f *forger) forge() {
	keys := f.c.keys
	real := f.realTerm()
	f.n++
	var (
		channel, payload, what, named string
		term                          int64
	)
	kind := f.rng.IntN(9)
	if !f.registry && (kind == 3 || kind == 4 || kind == 5) {
		kind -= 3 // a lock notice or malformed JSON instead
	}
	switch kind {
	case 0, 1: // a lock notice
		event := []string{"acquired", "released"}[f.rng.IntN(2)]
		var tl string
		term, tl = f.term(real)
		named = f.node()
		extra := ""
		if event == "released" && f.rng.IntN(2) == 0 {
			extra = fmt.Sprintf(`,"to":%q`, f.node())
		}
		channel, what = keys.Events, event+" notice, "+tl
		payload = fmt.Sprintf(`{"event":%q,"nodeId":%q,"term":%d%s,"forged":true}`, event, named, term, extra)
	case 2: // malformed JSON on the events or registry channel
		channel = []string{keys.Events, keys.RegistryEvents}[f.rng.IntN(2)]
		payload, what = malformedNotices[f.rng.IntN(len(malformedNotices))], "malformed notice"
	case 3, 4: // a live process unregistered
		named = f.liveNode()
		v, vl := f.version()
		reason := []string{"", `,"reason":"stale"`, `,"reason":"expired"`}[f.rng.IntN(3)]
		channel, what = keys.RegistryEvents, "unregistered notice for a live process, "+vl
		payload = fmt.Sprintf(`{"event":"unregistered","nodeId":%q%s%s,"forged":true}`, named, v, reason)
	case 5: // a ghost registered, or a live process registered with a forged role
		role, named := "slave", "ghost-"+strconv.Itoa(f.rng.IntN(3))
		what = "registered notice for a ghost"
		if f.rng.IntN(2) == 0 {
			named, role = f.liveNode(), []string{"slave", "master"}[f.rng.IntN(2)]
			what = "registered notice for a live process as " + role
		}
		var tl string
		if role == "master" {
			term, tl = f.term(real)
			what += ", " + tl
		}
		v, vl := f.version()
		process := fmt.Sprintf(`{"processId":%q,"nodeId":%q,"role":%q,"lastSeen":%q,"capabilities":{"canProcessDetections":true,"maxSubscriptions":1,"preferredWorkload":1},"term":%d}`,
			named, named, role, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), term)
		channel, what = keys.RegistryEvents, what+", "+vl
		payload = fmt.Sprintf(`{"event":"registered","nodeId":%q,"role":%q%s,"process":%s,"forged":true}`, named, role, v, process)
	case 6, 7: // a routed envelope
		to := f.node()
		from := f.node()
		var tl string
		term, tl = f.term(real)
		b, _ := json.Marshal(pubsub.Message{ID: ForgedIDPrefix + strconv.Itoa(f.n), From: from, Term: term, Type: msgTypeWork,
			Payload: json.RawMessage(`{"seq":0}`), SentAt: time.Now()})
		channel, payload, named = pubsub.SlaveChannel(to), string(b), to
		what = fmt.Sprintf("envelope from %s, %s", from, tl)
	default: // a malformed envelope
		to := f.liveNode()
		channel, payload, named = pubsub.SlaveChannel(to), malformedEnvelopes[f.rng.IntN(len(malformedEnvelopes))], to
		what = "malformed envelope"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	at := Now() // before the PUBLISH: its receivers act on it after this instant
	err := f.c.admin.Publish(ctx, channel, payload).Err()
	cancel()
	detail := fmt.Sprintf("%s on %s: %.200s", what, channel, payload)
	if err != nil && err != redis.Nil {
		detail += " (not published: " + err.Error() + ")"
	}
	f.c.add(Record{T: at, Kind: KindForgery, Seq: f.seq, Peer: named, Term: term, Highest: real, Detail: detail})
}

// msgTypeWork is the message type the node program handles.
const msgTypeWork = "work"
