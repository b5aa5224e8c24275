package rdb

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

var (
	//go:embed inbox_send.lua
	inboxSendSrc string
	//go:embed inbox_move.lua
	inboxMoveSrc string
	//go:embed inbox_adopt.lua
	inboxAdoptSrc string
	//go:embed inbox_dead.lua
	inboxDeadSrc string
	//go:embed dead_retry.lua
	deadRetrySrc string

	// inboxSendScript is inbox_send.lua: XADD messages to durable inboxes
	// only while the sender holds the lock under its term.
	inboxSendScript = redis.NewScript(withWrites(inboxSendSrc))
	// inboxMoveScript is inbox_move.lua: move entries of one durable inbox
	// to others only while the sender holds the lock under its term.
	inboxMoveScript = redis.NewScript(withWrites(inboxMoveSrc))
	// inboxAdoptScript is inbox_adopt.lua: re-stamp (or drop) the entries
	// of older terms at the head of inboxes, fenced by the lock and term.
	inboxAdoptScript = redis.NewScript(withWrites(inboxAdoptSrc))
	// inboxDeadScript is inbox_dead.lua: move one entry of an inbox to the
	// dead-letter stream.
	inboxDeadScript = redis.NewScript(withWrites(inboxDeadSrc))
	// deadRetryScript is dead_retry.lua: move one dead letter back to the
	// inbox of a live process under the current term.
	deadRetryScript = redis.NewScript(withWrites(deadRetrySrc))
)

// Fields of a durable inbox entry, as inbox_send.lua and inbox_move.lua
// write them.
const (
	// InboxFieldTerm holds the term under which the entry was written to
	// this inbox (its send, or its last move), as a decimal string.
	InboxFieldTerm = "t"
	// InboxFieldDeliveries holds how many times the entry was delivered in
	// the inboxes it was moved from; absent on an entry never moved.
	InboxFieldDeliveries = "d"
	// InboxFieldMessage holds the JSON envelope.
	InboxFieldMessage = "m"
)

// Queued is one message of InboxSend: the inbox to add it to and its bytes.
type Queued struct {
	// Inbox is the stream to XADD to (keyspace.Keys.Inbox).
	Inbox string
	// Message is the JSON envelope.
	Message []byte
}

// Entry ids InboxSend returns in place of a new entry id.
const (
	// SentFull: the inbox already held maxLen entries; nothing was added.
	SentFull = ""
	// SentNotLive: the inbox's process is not live in the registry; nothing
	// was added.
	SentNotLive = "-"
)

// InboxSend runs inbox_send.lua: if nodeID still holds the lock under term,
// it adds every message whose inbox belongs to a live process (k.Processes,
// and, with deadlines, its deadline in k.ProcessesExpiry when it has one:
// deadlines is for the emulated registry; the other backends' Redis has
// removed an expired entry already, so the check is left out) to that inbox, in
// order, in one atomic step, adds those processes to k.Inboxes, and returns
// the new entry id of each message, in order: SentFull for a message whose
// inbox already held maxLen entries or more (maxLen 0 means no limit),
// SentNotLive for one whose process is not live. It returns keyspace.ErrFenced, and
// adds nothing, otherwise. An empty msgs makes no call and returns nil and a
// nil error.
//
// The whole batch travels in one command: callers bound its size. Every
// inbox must be a name built by k.Inbox (under Redis Cluster it then carries
// k's hash tag).
func InboxSend(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, maxLen int64, deadlines bool, msgs []Queued) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if maxLen < 0 {
		return nil, fmt.Errorf("inbox send: maxLen %d is negative", maxLen)
	}
	keys := make([]string, 0, 5+len(msgs))
	keys = append(keys, k.Master, k.Term, k.Processes, k.Inboxes)
	if deadlines {
		keys = append(keys, k.ProcessesExpiry)
	}
	args := make([]any, 0, 4+len(msgs))
	args = append(args, nodeID, termArg(term), maxLen, k.Inbox(""))
	for _, m := range msgs {
		keys = append(keys, m.Inbox)
		args = append(args, m.Message)
	}
	reply, err := run(ctx, c, inboxSendScript, "inbox send", keys, args...)
	if err != nil {
		return nil, err
	}
	if reply == int64(-1) {
		return nil, fmt.Errorf("inbox send of %d messages as %q with term %d: %w", len(msgs), nodeID, term, keyspace.ErrFenced)
	}
	return entryIDs("inbox send", reply, len(msgs), sentCodes)
}

// sentCodes are the integers inbox_send.lua answers for a message it did
// not add, and the strings InboxSend returns for them.
var sentCodes = map[int64]string{0: SentFull, -3: SentNotLive}

// Move is one entry of InboxMove: its id in the inbox it leaves and the
// inbox it goes to.
type Move struct {
	// EntryID is the stream entry id in the old inbox ("<ms>-<seq>").
	EntryID string
	// To is the inbox to add it to (keyspace.Keys.Inbox of the new slave).
	To string
}

// Entry ids InboxMove returns in place of a new entry id.
const (
	// MovedGone: the entry was no longer in the old inbox (acknowledged
	// and deleted by its consumer meanwhile); nothing was moved.
	MovedGone = ""
	// MovedDropped: the entry had no envelope (it was not written by herd);
	// it was deleted from the old inbox and not moved.
	MovedDropped = "-"
)

// InboxMove runs inbox_move.lua: if nodeID still holds the lock under term,
// it moves each entry of the inbox from to its destination in one atomic
// step (XADD there with term and the deliveries so far, XACK and XDEL in
// from, under the consumer group group) and deletes from when it is left
// empty. It returns, for each move in order, the new entry id, MovedGone or
// MovedDropped; the inboxes written join k.Inboxes, and from leaves it when
// it is deleted. It returns keyspace.ErrFenced, and moves nothing, otherwise. An
// empty moves makes no call. Every inbox must be a name built by k.Inbox.
func InboxMove(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, group, from string, moves []Move) ([]string, error) {
	if len(moves) == 0 {
		return nil, nil
	}
	keys, args, err := moveCall(k, nodeID, term, group, from, moves)
	if err != nil {
		return nil, err
	}
	reply, err := run(ctx, c, inboxMoveScript, "inbox move", keys, args...)
	if err != nil {
		return nil, err
	}
	if reply == int64(-1) {
		return nil, fmt.Errorf("inbox move of %d entries from %q as %q with term %d: %w", len(moves), from, nodeID, term, keyspace.ErrFenced)
	}
	return entryIDs("inbox move", reply, len(moves), movedCodes)
}

// movedCodes are the integers inbox_move.lua answers for an entry it did
// not move, and the strings InboxMove returns for them.
var movedCodes = map[int64]string{0: MovedGone, -2: MovedDropped}

// moveCall checks moves and returns the KEYS and ARGV of inbox_move.lua for
// them: each destination inbox is a key once, and each move names its
// entry and the KEYS index of its destination.
func moveCall(k keyspace.Keys, nodeID string, term int64, group, from string, moves []Move) ([]string, []any, error) {
	keys := []string{k.Master, k.Term, k.Inboxes, from}
	index := make(map[string]int)
	args := make([]any, 0, 4+2*len(moves))
	args = append(args, nodeID, termArg(term), group, k.Inbox(""))
	for _, m := range moves {
		if err := checkMove(m, from); err != nil {
			return nil, nil, err
		}
		i, ok := index[m.To]
		if !ok {
			keys = append(keys, m.To)
			i = len(keys)
			index[m.To] = i
		}
		args = append(args, m.EntryID, i)
	}
	return keys, args, nil
}

// checkMove returns what makes m a move inbox_move.lua must not be sent
// out of the inbox from, or nil.
func checkMove(m Move, from string) error {
	switch {
	case !validEntryID(m.EntryID):
		return fmt.Errorf("inbox move: %q is not a stream entry id", m.EntryID)
	case m.To == from:
		return fmt.Errorf("inbox move: entry %s would move to the inbox it is in, %q", m.EntryID, from)
	}
	return nil
}

// entryIDs reads the reply of inbox_send.lua, inbox_move.lua or
// inbox_dead.lua, once the caller has dealt with the fenced reply (-1): n
// entry ids or integers, each replaced by its string in codes.
func entryIDs(name string, reply any, n int, codes map[int64]string) ([]string, error) {
	arr, ok := array(reply, n)
	if !ok {
		return nil, unexpected(name, reply)
	}
	ids := make([]string, len(arr))
	for i, v := range arr {
		if ids[i], ok = entryIDOf(v, codes); !ok {
			return nil, unexpected(name, reply)
		}
	}
	return ids, nil
}

// entryIDOf reads one element of an entryIDs reply: an entry id, or an
// integer replaced by its string in codes.
func entryIDOf(v any, codes map[int64]string) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, validEntryID(v)
	case int64:
		s, ok := codes[v]
		return s, ok
	}
	return "", false
}

// AdoptMode is what InboxAdopt does with an entry of an older term.
type AdoptMode string

const (
	// AdoptKeep adds the entry again under the caller's term: the new
	// master takes its predecessors' orders as its own.
	AdoptKeep AdoptMode = "adopt"
	// AdoptDrop deletes it: the new master drops its predecessors' orders.
	AdoptDrop AdoptMode = "drop"
)

// InboxState is what InboxAdopt found in one inbox.
type InboxState struct {
	// Gone: the inbox no longer exists (or was deleted now: empty, and its
	// process not live); its id left k.Inboxes.
	Gone bool
	// More: the call's budget ran out before the walk of this inbox reached
	// an entry of the caller's term; call again.
	More bool
	// Live: the inbox's process is live in the registry.
	Live bool
	// Taken is the number of entries adopted or dropped.
	Taken int
	// Malformed is the number of entries without an envelope deleted.
	Malformed int
}

// InboxAdopt runs inbox_adopt.lua: if nodeID still holds the lock under
// term, it walks the head of each inbox of ids and adopts (AdoptKeep: adds
// again under term, envelope and delivery count kept) or drops (AdoptDrop)
// each entry written under an older term, at most budget entries in all,
// and returns what it found in each inbox, in the order of ids. It returns
// keyspace.ErrFenced, and changes nothing, otherwise. Empty ids make no call.
// deadlines says, as for InboxSend, whether a process's liveness includes
// its deadline in k.ProcessesExpiry (the emulated registry).
func InboxAdopt(ctx context.Context, c redis.Scripter, k keyspace.Keys, nodeID string, term int64, group string, mode AdoptMode, budget int, deadlines bool, ids []string) ([]InboxState, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if budget <= 0 {
		return nil, fmt.Errorf("inbox adopt: budget %d is not positive", budget)
	}
	keys := fencedInboxKeys(k, len(ids))
	for _, id := range ids {
		keys = append(keys, k.Inbox(id))
	}
	flag := "0"
	if deadlines {
		flag = "1"
	}
	reply, err := run(ctx, c, inboxAdoptScript, "inbox adopt", keys, nodeID, termArg(term), group, k.Inbox(""), budget, string(mode), flag)
	if err != nil {
		return nil, err
	}
	if reply == int64(-1) {
		return nil, fmt.Errorf("inbox adopt of %d inboxes as %q with term %d: %w", len(ids), nodeID, term, keyspace.ErrFenced)
	}
	return parseAdopted(reply, len(ids))
}

// parseAdopted reads the reply of inbox_adopt.lua that was not fenced:
// four integers per inbox, for n inboxes.
func parseAdopted(reply any, n int) ([]InboxState, error) {
	arr, ok := array(reply, 4*n)
	if !ok {
		return nil, unexpected("inbox adopt", reply)
	}
	out := make([]InboxState, n)
	for i := range out {
		if out[i], ok = inboxStateOf(arr[4*i : 4*i+4]); !ok {
			return nil, unexpected("inbox adopt", reply)
		}
	}
	return out, nil
}

// inboxStateOf reads the four integers inbox_adopt.lua returns for one
// inbox: the walk (0 gone, 1 done, 2 more), live (0 or 1), taken and
// malformed.
func inboxStateOf(v []any) (InboxState, bool) {
	f := fieldsOf(v, 4)
	walk, live := f.countAt(0), f.countAt(1)
	s := InboxState{Gone: walk == 0, More: walk == 2, Live: live == 1, Taken: int(f.countAt(2)), Malformed: int(f.countAt(3))}
	return s, f.ok && walk <= 2 && live <= 1
}

// Fields of a dead letter in keyspace.Keys.Dead, as inbox_dead.lua writes them
// (InboxFieldMessage and InboxFieldTerm as in an inbox).
const (
	// DeadFieldDeliveries holds the entry's deliveries, all inboxes counted.
	DeadFieldDeliveries = "d"
	// DeadFieldError holds the last error, as text.
	DeadFieldError = "e"
	// DeadFieldProcess holds the id of the process that gave up on it.
	DeadFieldProcess = "p"
	// DeadFieldInbox holds the inbox the entry was in.
	DeadFieldInbox = "i"
)

// deadCodes are the integers inbox_dead.lua answers instead of a dead
// letter's id: 0, the entry is gone.
var deadCodes = map[int64]string{0: ""}

// InboxDead runs inbox_dead.lua: it moves entry entryID of inbox to k.Dead
// with the process that gives up, its deliveries and the last error, and
// acknowledges and deletes it in inbox, in one atomic step. It returns the
// dead letter's id, or "" when the entry is no longer in the inbox.
func InboxDead(ctx context.Context, c redis.Scripter, k keyspace.Keys, group, inbox, entryID, processID string, deliveries int64, lastErr string) (string, error) {
	if !validEntryID(entryID) {
		return "", fmt.Errorf("inbox dead: %q is not a stream entry id", entryID)
	}
	reply, err := run(ctx, c, inboxDeadScript, "inbox dead", []string{inbox, k.Dead}, group, entryID, processID, deliveries, lastErr)
	if err != nil {
		return "", err
	}
	ids, err := entryIDs("inbox dead", []any{reply}, 1, deadCodes)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// Errors of DeadRetry.
var (
	// ErrNoDeadLetter: the dead letter does not exist.
	ErrNoDeadLetter = errors.New("no such dead letter")
	// ErrNotLive: the process is not live in the registry.
	ErrNotLive = errors.New("process is not live in the registry")
	// ErrNoTerm: no term was ever minted on the lock name.
	ErrNoTerm = errors.New("no term was ever minted")
)

// DeadRetry runs dead_retry.lua: it adds dead letter deadID to the inbox of
// processID under the term key's current value, its deliveries counted
// from zero, and deletes it from k.Dead, in one atomic step, when processID
// is live. It returns the new entry id; ErrNoDeadLetter, ErrNotLive or
// ErrNoTerm when it did nothing.
func DeadRetry(ctx context.Context, c redis.Scripter, k keyspace.Keys, deadID, processID string) (string, error) {
	if !validEntryID(deadID) {
		return "", fmt.Errorf("dead retry: %q is not a stream entry id", deadID)
	}
	reply, err := run(ctx, c, deadRetryScript, "dead retry", []string{k.Dead, k.Term, k.Processes, k.ProcessesExpiry, k.Inboxes, k.Inbox(processID)}, deadID, processID)
	if err != nil {
		return "", err
	}
	if id, ok := reply.(string); ok && validEntryID(id) {
		return id, nil
	}
	return "", deadRetryRefused(reply, deadID, processID, k.Term)
}

// deadRetryRefused is the error of a reply of dead_retry.lua that is not
// an entry id: why it did nothing (0 no dead letter, -3 the process is not
// live, -4 no term in termKey), or ErrUnexpectedReply.
func deadRetryRefused(reply any, deadID, processID, termKey string) error {
	switch reply {
	case int64(0):
		return fmt.Errorf("dead retry of %s: %w", deadID, ErrNoDeadLetter)
	case int64(-3):
		return fmt.Errorf("dead retry of %s to %q: %w", deadID, processID, ErrNotLive)
	case int64(-4):
		return fmt.Errorf("dead retry of %s: %q: %w", deadID, termKey, ErrNoTerm)
	}
	return unexpected("dead retry", reply)
}

// fencedInboxKeys are the first KEYS of inbox_adopt.lua: the lock, the
// term, the registry's entries and deadlines and the set of inboxes, with
// room for n inboxes after them. (InboxSend orders its own: the set comes
// before the deadlines key, which it sends only on the emulated registry.)
func fencedInboxKeys(k keyspace.Keys, n int) []string {
	keys := make([]string, 0, 5+n)
	return append(keys, k.Master, k.Term, k.Processes, k.ProcessesExpiry, k.Inboxes)
}

// validEntryID reports whether s is a complete stream entry id, "<ms>-<seq>".
func validEntryID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}
