package scripts

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed inbox_send.lua
	inboxSendSrc string
	//go:embed inbox_move.lua
	inboxMoveSrc string

	// inboxSendScript is inbox_send.lua: XADD messages to durable inboxes
	// only while the sender holds the lock under its term.
	inboxSendScript = redis.NewScript(inboxSendSrc)
	// inboxMoveScript is inbox_move.lua: move entries of one durable inbox
	// to others only while the sender holds the lock under its term.
	inboxMoveScript = redis.NewScript(inboxMoveSrc)
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
	// Inbox is the stream to XADD to (Keys.Inbox).
	Inbox string
	// Message is the JSON envelope.
	Message []byte
}

// InboxSend runs inbox_send.lua: if nodeID still holds the lock under term,
// it adds every message to its inbox, in order, in one atomic step, and
// returns the new entry id of each, in order; "" for a message whose inbox
// already held maxLen entries or more (nothing was added for it; maxLen 0
// means no limit). It returns ErrFenced, and adds nothing, otherwise. An
// empty msgs makes no call and returns nil and a nil error.
//
// The whole batch travels in one command: callers bound its size. Under
// Redis Cluster every inbox must carry k's hash tag (Keys.Inbox does).
func InboxSend(ctx context.Context, c redis.Scripter, k Keys, nodeID string, term int64, maxLen int64, msgs []Queued) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if maxLen < 0 {
		return nil, fmt.Errorf("inbox send: maxLen %d is negative", maxLen)
	}
	keys := make([]string, 0, 2+len(msgs))
	keys = append(keys, k.Master, k.Term)
	args := make([]any, 0, 3+len(msgs))
	args = append(args, nodeID, termArg(term), maxLen)
	for _, m := range msgs {
		keys = append(keys, m.Inbox)
		args = append(args, m.Message)
	}
	reply, err := run(ctx, c, inboxSendScript, "inbox send", keys, args...)
	if err != nil {
		return nil, err
	}
	return entryIDs("inbox send", reply, len(msgs), fmt.Sprintf("inbox send of %d messages as %q with term %d", len(msgs), nodeID, term), false)
}

// Move is one entry of InboxMove: its id in the inbox it leaves and the
// inbox it goes to.
type Move struct {
	// EntryID is the stream entry id in the old inbox ("<ms>-<seq>").
	EntryID string
	// To is the inbox to add it to (Keys.Inbox of the new slave).
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
// MovedDropped. It returns ErrFenced, and moves nothing, otherwise. An empty
// moves makes no call.
func InboxMove(ctx context.Context, c redis.Scripter, k Keys, nodeID string, term int64, group, from string, moves []Move) ([]string, error) {
	if len(moves) == 0 {
		return nil, nil
	}
	keys := []string{k.Master, k.Term, from}
	index := make(map[string]int)
	args := make([]any, 0, 3+2*len(moves))
	args = append(args, nodeID, termArg(term), group)
	for _, m := range moves {
		if !validEntryID(m.EntryID) {
			return nil, fmt.Errorf("inbox move: %q is not a stream entry id", m.EntryID)
		}
		if m.To == from {
			return nil, fmt.Errorf("inbox move: entry %s would move to the inbox it is in, %q", m.EntryID, from)
		}
		i, ok := index[m.To]
		if !ok {
			keys = append(keys, m.To)
			i = len(keys)
			index[m.To] = i
		}
		args = append(args, m.EntryID, i)
	}
	reply, err := run(ctx, c, inboxMoveScript, "inbox move", keys, args...)
	if err != nil {
		return nil, err
	}
	return entryIDs("inbox move", reply, len(moves), fmt.Sprintf("inbox move of %d entries from %q as %q with term %d", len(moves), from, nodeID, term), true)
}

// entryIDs reads the reply of inbox_send.lua or inbox_move.lua: n entry ids
// or integers (0: "", -2 when move: MovedDropped), or -1 when the caller
// was fenced (an error wrapping ErrFenced, prefixed with fenced).
func entryIDs(name string, reply any, n int, fenced string, move bool) ([]string, error) {
	if v, ok := reply.(int64); ok && v == -1 {
		return nil, fmt.Errorf("%s: %w", fenced, ErrFenced)
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != n {
		return nil, unexpected(name, reply)
	}
	ids := make([]string, len(arr))
	for i, v := range arr {
		switch v := v.(type) {
		case string:
			if !validEntryID(v) {
				return nil, unexpected(name, reply)
			}
			ids[i] = v
		case int64:
			switch {
			case v == 0:
				ids[i] = ""
			case v == -2 && move:
				ids[i] = MovedDropped
			default:
				return nil, unexpected(name, reply)
			}
		default:
			return nil, unexpected(name, reply)
		}
	}
	return ids, nil
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
