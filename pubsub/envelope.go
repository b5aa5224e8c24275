package pubsub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/scripts"
)

// Limits of the envelope. They are part of the wire contract: a message
// beyond them is refused by the sender and rejected by the receiver.
const (
	// MaxPayloadSize is the largest payload, in bytes of JSON text: 1 MiB.
	// Redis pub/sub copies every message into each subscriber's output
	// buffer, so big payloads belong in a key, with the key name sent here.
	MaxPayloadSize = 1 << 20
	// MaxNameLen is the longest id, from, type and slave id, in bytes:
	// scripts.MaxNameLen, the limit of every name herd validates (a NodeID
	// longer than it is refused by masterelection.New too).
	MaxNameLen = scripts.MaxNameLen
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
		return Message{}, fmt.Errorf("%w: not a JSON object: %s", ErrMalformedEnvelope, excerpt(b))
	}
	var w envelopeJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrMalformedEnvelope, err)
	}
	for _, f := range []struct{ what, v string }{{"id", w.ID}, {"from", w.From}, {"type", w.Type}} {
		if err := checkName(f.what, f.v); err != nil {
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

// encodePayload turns what a caller passes into raw JSON as the envelope
// carries it: json.RawMessage must be valid JSON and is compacted (and HTML
// characters escaped, as json.Marshal does), nil becomes null, anything else
// goes through json.Marshal. The size limit applies to the result, and to a
// json.RawMessage also before it is compacted, so that no more than the
// limit is ever scanned.
func encodePayload(p any) (json.RawMessage, error) {
	var raw json.RawMessage
	switch v := p.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		if len(v) > MaxPayloadSize {
			return nil, fmt.Errorf("%w: payload is %d bytes, the limit is %d", ErrPayloadTooLarge, len(v), MaxPayloadSize)
		}
		var buf bytes.Buffer
		buf.Grow(len(v))
		if err := json.Compact(&buf, v); err != nil {
			return nil, fmt.Errorf("%w: json.RawMessage %s is not valid JSON", ErrInvalidPayload, excerpt(v))
		}
		raw = buf.Bytes()
		if bytes.ContainsAny(raw, "<>&\u2028\u2029") {
			var esc bytes.Buffer
			json.HTMLEscape(&esc, raw)
			raw = esc.Bytes()
		}
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPayload, err)
		}
		raw = b
	}
	if len(raw) > MaxPayloadSize {
		return nil, fmt.Errorf("%w: payload is %d bytes, the limit is %d", ErrPayloadTooLarge, len(raw), MaxPayloadSize)
	}
	return raw, nil
}

// encode builds the envelope bytes of a message this process sends, sent
// at now: the bytes Message.MarshalJSON writes, without its reflection. id,
// from and msgType are validated names (checkName); payload is what
// encodePayload returned.
func encode(id, from string, term int64, msgType string, payload json.RawMessage, now time.Time) []byte {
	return encodeAt(id, from, term, msgType, payload, sentAtText(now))
}

// sentAtText is the sentAt member's value for t, without quotes.
func sentAtText(t time.Time) []byte { return t.UTC().AppendFormat(nil, wire.TimeLayout) }

// encodeAt is encode with sentAt already formatted (sentAtText), for
// messages sent together.
func encodeAt(id, from string, term int64, msgType string, payload json.RawMessage, sentAt []byte) []byte {
	b := make([]byte, 0, 64+len(id)+len(from)+len(msgType)+len(payload)+len(sentAt))
	b = append(b, `{"id":`...)
	b = appendName(b, id)
	b = append(b, `,"from":`...)
	b = appendName(b, from)
	b = append(b, `,"term":`...)
	b = strconv.AppendInt(b, term, 10)
	b = append(b, `,"type":`...)
	b = appendName(b, msgType)
	b = append(b, `,"payload":`...)
	b = append(b, payload...)
	b = append(b, `,"sentAt":"`...)
	b = append(b, sentAt...)
	return append(b, `"}`...)
}

// appendName appends s as a JSON string, escaped exactly as json.Marshal
// escapes it: as it is when it holds only printable ASCII that needs no
// escaping (every name herd makes), through json.Marshal otherwise.
func appendName(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// excerpt quotes the start of b for an error message.
func excerpt(b []byte) string { return fmt.Sprintf("%q", wire.Truncate(string(b))) }
