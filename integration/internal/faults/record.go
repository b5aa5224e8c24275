package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Now returns the system's CLOCK_MONOTONIC in nanoseconds. Every process of
// a run (the harness and each node) stamps its records with it, so instants
// taken in different processes on one machine can be compared. Go's own
// monotonic readings (time.Now) are offsets from the start of each process
// and cannot be compared across processes; clock_gettime can.
//
// It is also the clock masterelection's self-fencing deadline runs on: on
// Linux the Go runtime reads CLOCK_MONOTONIC for time.Now's monotonic part.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC exists on every Linux; failing to read it means
		// the records cannot be trusted at all.
		panic(fmt.Sprintf("faults: clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// Kind names a record.
type Kind string

// Records written by a node (integration/node). T is always the moment the
// fact held, on the CLOCK_MONOTONIC of Now.
const (
	// KindStart: the node process began; Pid, LockTTL and Margin are set.
	KindStart Kind = "start"
	// KindReady: the election's Start returned; Detail is "master" or "slave".
	KindReady Kind = "ready"
	// KindAcquired: the first observation in which Term returned Term. T is
	// the instant just before that call (Begin of the observation), so the
	// mastership cannot have been acted on before T; Seen, when set, the
	// instant just after it.
	KindAcquired Kind = "acquired"
	// KindLost: the mastership Term ended. T is the instant just after the
	// last call that still returned Term (the end of the last "true"
	// observation), Begin the instant just before it, and Seen the instant
	// just before the first call that returned something else.
	KindLost Kind = "lost"
	// KindLockCall: the node sent the acquire ("acquire", or AcquireRegister
	// for Start's acquire that registers the new master in the same call)
	// or renew ("renew") script (Detail). T is
	// taken in a go-redis hook, after the library read its own clock for the
	// self-fencing deadline, so the deadline is at most T + LockTTL - Margin.
	KindLockCall Kind = "lock-call"
	// AcquireRegister is the Detail of a KindLockCall of Start's acquire,
	// which registers the new master in its own call (rdb.AcquireRegister,
	// or rdb.AskTaking with Start's questions: recorded whether or not its
	// answers let it make the attempt).
	AcquireRegister = "acquire register"
	// KindObserved: ObservedTerm rose to Term.
	KindObserved Kind = "observed"
	// KindGap: the poller did not run from Begin to T (the process was
	// stopped or starved). Informational.
	KindGap Kind = "gap"
	// KindEvent: an election event (Detail is its kind; Term, Peer as given).
	KindEvent Kind = "event"
	// KindError: an error event or a failed call; Detail is the text.
	KindError Kind = "error"
	// KindSent: the master decided to send message Seq under Term; Begin and
	// T bracket the Term call that returned it.
	KindSent Kind = "sent"
	// KindPublish: the PUBLISH of message Seq (term Term) to Peer's channel
	// is about to leave the process (taken in a go-redis hook).
	KindPublish Kind = "publish"
	// KindRefused: sending message Seq to Peer failed with
	// pubsub.ErrNotMaster (the mastership ended after the decision, or
	// Redis refused the message: send-side fencing).
	KindRefused Kind = "refused"
	// KindAccepted: message Seq from Peer with Term was handed to the
	// handler; Highest is the subscriber's highest term at that moment.
	KindAccepted Kind = "accepted"
	// KindRejected: a message from Peer with Term was rejected as stale;
	// Highest is the term it was compared with.
	KindRejected Kind = "rejected"
	// KindSlaveJoined and KindSlaveLeft: the master reported slave Peer
	// registered or removed, during mastership Term.
	KindSlaveJoined Kind = "slave-joined"
	KindSlaveLeft   Kind = "slave-left"
	// KindCtxLive: the first observation in which a ctx the election handed
	// out for mastership Term was live (Err() == nil). Detail names the ctx
	// (CtxMasterAcquired or CtxRunIfMaster); T is the instant just before
	// that observation (its Begin). The node reads a ctx right after Term, in
	// the same observation, so a ctx seen live in the observation whose Term
	// call first returned something else was live after IsMaster turned false.
	KindCtxLive Kind = "ctx-live"
	// KindCtxDone: the ctx Detail of mastership Term was first seen done. T is
	// the instant just after the last observation that saw it live, Begin the
	// instant just before that observation, and Seen the instant just before
	// the first observation that saw it done. Begin is 0 when the ctx was
	// never seen live (it was done when the node first read it).
	KindCtxDone Kind = "ctx-done"
	// KindStopping: the node got SIGTERM and is stopping gracefully.
	KindStopping Kind = "stopping"
	// KindExit: the node is about to exit; Detail is the outcome.
	KindExit Kind = "exit"
	// KindForgedAccepted: a message the forger published (its ID starts
	// with ForgedIDPrefix) was handed to the handler: Peer is the sender it
	// claimed, Term its term, Highest the subscriber's highest term then.
	KindForgedAccepted Kind = "forged-accepted"
	// KindTransfer: the node was asked on its standard input to transfer
	// its mastership to Peer ("" for a plain step-down); Detail is
	// "requested", then "returned: ok" or "returned: <error>".
	KindTransfer Kind = "transfer"
	// KindHandBack: the node's mastership Term ended by a hand-back to Peer,
	// a candidate of higher priority (masterelection.Config.Priority);
	// Detail is the step-down's reason. T is when the election reported it,
	// right before master-lost.
	KindHandBack Kind = "hand-back"
	// KindDurableStored (node -durable): the master's durable Send of
	// message Detail (its id, Seq in its payload) to Peer's inbox under Term
	// returned nil; Begin is the instant just before the call, T just after.
	KindDurableStored Kind = "durable-stored"
	// KindDurableHandled: the durable handler was given message Detail (Seq
	// in its payload) from Peer, written to the inbox under Term, delivered
	// for the Deliveries-th time; Highest is the Consumer's fence then.
	KindDurableHandled Kind = "durable-handled"
	// KindDurableRejected: the Consumer rejected message Detail from Peer,
	// written under Term, as stale (Highest is the term it was compared
	// with), or refused it as unverified (Seq is 1).
	KindDurableRejected Kind = "durable-rejected"
	// KindDurableLeft (written by the harness after the shutdown): message
	// Detail was still in the inbox of Peer when every node had stopped.
	KindDurableLeft Kind = "durable-left"
	// KindDurableDead (written by the harness after the shutdown): message
	// Detail was in the dead-letter stream, given up on by Peer after
	// Deliveries deliveries (Term: the term of its last inbox).
	KindDurableDead Kind = "durable-dead"
	// KindDurableQuiet: the node was told on its standard input to send no
	// more durable messages ("durable-quiet"), and no durable send of its
	// is in flight any more: written once the sends under way have
	// returned. The harness asks every node for it before the final drain.
	KindDurableQuiet Kind = "durable-quiet"
	// KindBurst: the node was told on its standard input to send a burst of
	// Seq durable messages ("burst <n>"), spread over its slaves, as fast as
	// it can; Detail is "begun", then "done: stored <k>", or why it was
	// not sent ("not master", ...). Term is the term it was sent under.
	KindBurst Kind = "burst"
	// KindItemLive and KindItemDone (node -assign): the OnAssigned ctx of
	// the assign item Detail was first seen live, then first seen done, as
	// KindCtxLive and KindCtxDone are for a mastership's ctx (T, Begin and
	// Seen mean the same; Seq numbers the ctx within the process).
	KindItemLive Kind = "item-live"
	KindItemDone Kind = "item-done"
	// KindTwinRefused: the election's Start failed with
	// masterelection.ErrDuplicateNodeID (another live process runs under
	// the node's id); Detail is the error. The node exits right after.
	KindTwinRefused Kind = "twin-refused"
	// KindSteppedAside: after Start returned, the election stepped aside
	// because another process took the node's id while this one was silent
	// (masterelection.MasterElection.SteppedAside); Detail is the error.
	// The node stops gracefully right after.
	KindSteppedAside Kind = "stepped-aside"
)

// KillLatency bounds how long a process may still run after the call that
// sent it SIGKILL returned: the kernel interrupts the CPU it runs on at
// once, which takes microseconds.
const KillLatency = time.Millisecond

// ForgedIDPrefix starts the ID of every envelope the forger publishes, so
// that the node can tell, when its handler is given one, that the library
// handed it a forgery (see KindForgedAccepted). Forged notices carry the
// member "forged":true, which herd ignores and the registry watcher reads.
const ForgedIDPrefix = "forged-"

// The ctxs a node probes, named in the Detail of KindCtxLive and KindCtxDone.
const (
	// CtxMasterAcquired is the ctx given to an OnMasterAcquired handler.
	CtxMasterAcquired = "master-acquired"
	// CtxRunIfMaster is the ctx given to the fn of RunIfMaster.
	CtxRunIfMaster = "run-if-master"
)

// Records written by the harness (Node is HarnessNode).
const (
	// KindSpawn: process Peer (node id Node) was started with Pid. A twin
	// (FaultTwin), started under the node id of a live process, has its
	// own label in Peer, that process's node id in Node, and a Detail that
	// begins with TwinOf.
	KindSpawn Kind = "spawn"
	// KindDead: process Proc has exited and been reaped; Detail is how.
	KindDead Kind = "dead"
	// KindKilled: the harness sent SIGKILL to process Peer; T is taken
	// when the call returned, after which the process runs no more code
	// of its own (within KillLatency). The reaping (KindDead) may come
	// milliseconds later on a busy machine.
	KindKilled Kind = "killed"
	// KindFault: fault number Seq of kind Detail was injected on Peer (a
	// process label, "redis", or "").
	KindFault Kind = "fault"
	// KindHeal: fault number Seq was undone.
	KindHeal Kind = "heal"
	// KindRedisDown: Redis lost its data (restart without persistence).
	KindRedisDown Kind = "redis-down"
	// KindNote: anything else worth seeing in the timeline.
	KindNote Kind = "note"
	// KindSettled: the cluster settled (one master, Peer, with Term, that
	// Redis agrees on, and every live process listed in the registry).
	KindSettled Kind = "settled"
	// KindOwned: after the cluster settled (Detail says after what; Begin
	// is when the harness began to wait), every assign item's OnAssigned
	// ctx was live in a running slave at T.
	KindOwned Kind = "owned"
	// KindShutdown: the harness began stopping every node at the end of the
	// schedule.
	KindShutdown Kind = "shutdown"
	// KindForgery: the forger (a plain client, not herd) published a forged
	// message during fault Seq: Detail says what and where (a lock notice,
	// a registry notice, an envelope or malformed JSON, and the payload),
	// Peer is the node id it names, Term the term it carries (0: none) and
	// Highest the real term the forger read from Redis just before.
	KindForgery Kind = "forgery"
	// KindRegNotice: the registry watcher received a notice on
	// <lock>:registry-events: Detail is its event (with " forged" appended
	// for the forger's), Peer the node id, Role and Term the entry's role and
	// term (registered notices), Seq its version (0: none), Seen the entry's
	// lastSeen converted to the monotonic clock (0: none).
	KindRegNotice Kind = "reg-notice"
	// KindRegPoll: the registry watcher read every entry (Processes) between
	// Begin and T; Detail lists them (see ParseListing).
	KindRegPoll Kind = "reg-poll"
	// KindRegChange: the listing of a KindRegPoll differs from the one
	// before; Detail says how. For the timeline only.
	KindRegChange Kind = "reg-change"
)

// TwinOf begins the Detail of a twin's KindSpawn: "twin of <label>", the
// label of the live process whose node id it was started under.
const TwinOf = "twin of "

// HarnessNode is the Node of the records the harness writes.
const HarnessNode = "harness"

// Record is one line of a node's or the harness's log: one fact with the
// CLOCK_MONOTONIC instant it held. Which fields are set depends on Kind.
type Record struct {
	T       int64  `json:"t"`
	Proc    string `json:"proc"`           // process label, unique per process in a run
	Node    string `json:"node,omitempty"` // election node id (two processes may share one)
	Kind    Kind   `json:"kind"`
	Term    int64  `json:"term,omitempty"`
	Begin   int64  `json:"begin,omitempty"`
	Seen    int64  `json:"seen,omitempty"`
	Seq     int64  `json:"seq,omitempty"`
	Peer    string `json:"peer,omitempty"`
	Highest int64  `json:"highest,omitempty"`
	Pid     int    `json:"pid,omitempty"`
	LockTTL int64  `json:"lockTtl,omitempty"` // ns
	Margin  int64  `json:"margin,omitempty"`  // ns, the effective StepDownMargin
	Detail  string `json:"detail,omitempty"`
	// Role is a registry role (KindRegNotice).
	Role string `json:"role,omitempty"`
	// Variant is the variant of a fault (KindFault of FaultTransfer: see
	// the Transfer* constants).
	Variant string `json:"variant,omitempty"`
	// Deliveries is a durable entry's delivery count (KindDurableHandled).
	Deliveries int64 `json:"deliveries,omitempty"`
}

// Listed is one registry entry as a KindRegPoll saw it.
type Listed struct {
	ID   string
	Role string
	Term int64
	// LastSeen is the entry's lastSeen on the monotonic clock of Now (the
	// wall clock of the machine, converted at the read).
	LastSeen int64
}

// FormatListing writes entries as the Detail of a KindRegPoll:
// "id/role/term/lastSeen" separated by spaces.
func FormatListing(entries []Listed) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s/%s/%d/%d", e.ID, e.Role, e.Term, e.LastSeen)
	}
	return b.String()
}

// ParseListing reads the Detail of a KindRegPoll; entries it cannot read
// are left out.
func ParseListing(detail string) []Listed {
	var out []Listed
	for _, f := range strings.Fields(detail) {
		parts := strings.Split(f, "/")
		if len(parts) != 4 {
			continue
		}
		term, err1 := strconv.ParseInt(parts[2], 10, 64)
		seen, err2 := strconv.ParseInt(parts[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Listed{ID: parts[0], Role: parts[1], Term: term, LastSeen: seen})
	}
	return out
}

// ParseRecord decodes one JSON line.
func ParseRecord(line []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return Record{}, fmt.Errorf("faults: record %.80q: %w", line, err)
	}
	if r.Kind == "" || r.Proc == "" {
		return Record{}, fmt.Errorf("faults: record %.80q has no kind or proc", line)
	}
	return r, nil
}

// Duration converts a difference of two Now readings.
func Duration(ns int64) time.Duration { return time.Duration(ns) }

// ReadRecords reads a history written as JSON lines (a node's stdout, or the
// .jsonl file the harness writes beside a failed schedule's timeline).
func ReadRecords(r io.Reader) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		rec, err := ParseRecord(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("faults: read records: %w", err)
	}
	return recs, nil
}
