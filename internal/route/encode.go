package route

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/herdkit/herd/internal/wire"
)

// MaxPayloadSize is the largest payload, in bytes of JSON text
// (pubsub.MaxPayloadSize).
const MaxPayloadSize = 1 << 20

// Mastership is what a sender needs of this process's mastership
// (pubsub.Mastership, implemented by *masterelection.MasterElection). It must
// be safe for concurrent use.
type Mastership interface {
	NodeID() string
	IsMaster() bool
	Term() int64
}

// LiveTerm returns l's term when l is master under a positive term, and
// ErrNotMaster otherwise.
func LiveTerm(l Mastership) (int64, error) {
	if !l.IsMaster() {
		return 0, ErrNotMaster
	}
	term := l.Term()
	if term <= 0 {
		return 0, ErrNotMaster
	}
	return term, nil
}

// Envelope is one message stamped for sending.
type Envelope struct {
	// ID is the message id, a random UUID.
	ID string
	// Term is the term stamped on it.
	Term int64
	// Data is the envelope's JSON.
	Data []byte
}

// Stamp validates msgType and payload, reads l's live term once
// (ErrNotMaster without one) and encodes the envelope of one message from
// l, sent at now, with a fresh id.
func Stamp(l Mastership, msgType string, payload any, now time.Time) (Envelope, error) {
	if err := CheckName("message type", msgType); err != nil {
		return Envelope{}, err
	}
	raw, err := EncodePayload(payload)
	if err != nil {
		return Envelope{}, err
	}
	term, err := LiveTerm(l)
	if err != nil {
		return Envelope{}, err
	}
	id := uuid.NewString()
	return Envelope{ID: id, Term: term, Data: Encode(id, l.NodeID(), term, msgType, raw, now)}, nil
}

// EncodePayload turns what a caller passes into raw JSON as the envelope
// carries it: json.RawMessage must be valid JSON and is compacted (and HTML
// characters escaped, as json.Marshal does), nil becomes null, anything else
// goes through json.Marshal. The size limit applies to the result, and to a
// json.RawMessage also before it is compacted, so that no more than the
// limit is ever scanned.
func EncodePayload(p any) (json.RawMessage, error) {
	var raw json.RawMessage
	var err error
	switch v := p.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		raw, err = compactRaw(v)
	default:
		if raw, err = json.Marshal(v); err != nil {
			err = fmt.Errorf("%w: %w", ErrInvalidPayload, err)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := checkSize(len(raw)); err != nil {
		return nil, err
	}
	return raw, nil
}

// compactRaw is EncodePayload of a json.RawMessage: v compacted, with
// HTML characters escaped as json.Marshal escapes them. v is refused
// before it is scanned when it is above the limit.
func compactRaw(v json.RawMessage) (json.RawMessage, error) {
	if err := checkSize(len(v)); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(len(v))
	if err := json.Compact(&buf, v); err != nil {
		return nil, fmt.Errorf("%w: json.RawMessage %s is not valid JSON", ErrInvalidPayload, Excerpt(v))
	}
	raw := buf.Bytes()
	if bytes.ContainsAny(raw, "<>&\u2028\u2029") {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, raw)
		raw = esc.Bytes()
	}
	return raw, nil
}

// checkSize refuses a payload of n bytes when it is above MaxPayloadSize.
func checkSize(n int) error {
	if n > MaxPayloadSize {
		return fmt.Errorf("%w: payload is %d bytes, the limit is %d", ErrPayloadTooLarge, n, MaxPayloadSize)
	}
	return nil
}

// Encode builds the envelope bytes of a message this process sends, sent
// at now: the bytes pubsub.Message.MarshalJSON writes, without its
// reflection. id, from and msgType are validated names (CheckName); payload
// is what EncodePayload returned.
func Encode(id, from string, term int64, msgType string, payload json.RawMessage, now time.Time) []byte {
	return encodeAt(id, from, term, msgType, payload, sentAtText(now))
}

// sentAtText is the sentAt member's value for t, without quotes.
func sentAtText(t time.Time) []byte { return t.UTC().AppendFormat(nil, wire.TimeLayout) }

// encodeAt is Encode with sentAt already formatted (sentAtText), for
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
		if escaped(s[i]) {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// escaped reports whether json.Marshal writes the byte c of a string
// otherwise than as it is: a control character, a byte outside ASCII
// (part of a character it may escape), a quote, a backslash or an HTML
// character.
func escaped(c byte) bool {
	switch c {
	case '"', '\\', '<', '>', '&':
		return true
	}
	return c < 0x20 || c >= 0x7f
}

// Excerpt quotes the start of b for an error message.
func Excerpt(b []byte) string { return fmt.Sprintf("%q", wire.Truncate(string(b))) }
