package pubsub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/internal/wire"
)

// Limits of the envelope. They are part of the wire contract: a message
// beyond them is refused by the sender and rejected by the receiver.
const (
	// MaxPayloadSize is the largest payload, in bytes of JSON text: 1 MiB.
	// Redis pub/sub copies every message into each subscriber's output
	// buffer, so big payloads belong in a key, with the key name sent here.
	MaxPayloadSize = route.MaxPayloadSize
	// MaxNameLen is the longest id, from, type and slave id, in bytes:
	// keyspace.MaxNameLen, the limit of every name herd validates (a NodeID
	// longer than it is refused by masterelection.New too).
	MaxNameLen = route.MaxNameLen
	// MaxEnvelopeSize is the longest envelope a receiver decodes, in bytes:
	// MaxPayloadSize plus room for the other members.
	MaxEnvelopeSize = MaxPayloadSize + 16<<10
)

// Message is the envelope of everything sent over the slave channels and the
// master inbox. Its JSON form, documented for processes written in other
// languages in docs/routing.md, is
//
//	{"id":"…","from":"…","term":1763770000123,"type":"…","payload":{…},"sentAt":"2025-11-22T00:06:40.123Z"}
//
// where payload is any JSON value and sentAt is written as JavaScript's
// Date.prototype.toISOString writes it.
type Message struct {
	// ID identifies the message (a random UUID from herd senders). A
	// Broadcast gives every slave the same ID.
	ID string
	// From is the node id of the sender.
	From string
	// Term is the sender's fencing term: the master's term on a slave
	// channel (always positive), 0 on the master inbox.
	Term int64
	// Type selects the handler.
	Type string
	// Payload is the application's data as raw JSON; "null" when absent.
	Payload json.RawMessage
	// SentAt is the sender's clock when it sent the message (millisecond
	// precision, UTC); zero when the sender did not say.
	SentAt time.Time
}

// Decode unmarshals the payload into v.
func (m Message) Decode(v any) error {
	if err := json.Unmarshal(m.Payload, v); err != nil {
		return fmt.Errorf("decode payload of %q message %q: %w", m.Type, m.ID, err)
	}
	return nil
}

// envelopeJSON is the JSON form. SentAt is raw so that both strings and numbers can
// be read.
type envelopeJSON struct {
	ID      string          `json:"id"`
	From    string          `json:"from"`
	Term    int64           `json:"term"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	SentAt  json.RawMessage `json:"sentAt"`
}

// MarshalJSON writes the wire form. It does not validate; senders in this
// package validate before.
func (m Message) MarshalJSON() ([]byte, error) {
	w := envelopeJSON{ID: m.ID, From: m.From, Term: m.Term, Type: m.Type, Payload: m.Payload}
	if len(w.Payload) == 0 {
		w.Payload = json.RawMessage("null")
	}
	if m.SentAt.IsZero() {
		w.SentAt = json.RawMessage(`""`)
	} else {
		w.SentAt = json.RawMessage(`"` + m.SentAt.UTC().Format(wire.TimeLayout) + `"`)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads and validates the wire form as ParseMessage does.
// (json.Unmarshal checks the JSON syntax before calling it, so syntax errors
// come from encoding/json unwrapped.)
func (m *Message) UnmarshalJSON(b []byte) error {
	msg, err := ParseMessage(b)
	if err != nil {
		return err
	}
	*m = msg
	return nil
}

// ParseMessage decodes and validates one envelope as the receivers do: the
// error matches ErrMalformedEnvelope (and ErrInvalidName for a bad id, from
// or type) or ErrPayloadTooLarge. Members it does not know are ignored, so
// senders may add their own. It does not check the term against any fence.
func ParseMessage(b []byte) (Message, error) {
	if len(b) > MaxEnvelopeSize {
		return Message{}, fmt.Errorf("%w: envelope is %d bytes, the limit is %d", ErrPayloadTooLarge, len(b), MaxEnvelopeSize)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return Message{}, fmt.Errorf("%w: not a JSON object: %s", ErrMalformedEnvelope, route.Excerpt(b))
	}
	var w envelopeJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrMalformedEnvelope, err)
	}
	for _, f := range []struct{ what, v string }{{"id", w.ID}, {"from", w.From}, {"type", w.Type}} {
		if err := route.CheckName(f.what, f.v); err != nil {
			return Message{}, fmt.Errorf("%w: %w", ErrMalformedEnvelope, err)
		}
	}
	if w.Term < 0 {
		return Message{}, fmt.Errorf("%w: term %d is negative", ErrMalformedEnvelope, w.Term)
	}
	if len(w.Payload) > MaxPayloadSize {
		return Message{}, fmt.Errorf("%w: payload is %d bytes, the limit is %d", ErrPayloadTooLarge, len(w.Payload), MaxPayloadSize)
	}
	if len(w.Payload) == 0 {
		w.Payload = json.RawMessage("null")
	}
	sentAt, err := wire.ParseTime(w.SentAt)
	if err != nil {
		return Message{}, fmt.Errorf("%w: sentAt: %w", ErrMalformedEnvelope, err)
	}
	return Message{ID: w.ID, From: w.From, Term: w.Term, Type: w.Type, Payload: w.Payload, SentAt: sentAt}, nil
}
