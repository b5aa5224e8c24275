package durable

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/herdkit/herd/pubsub"
)

// envelope encodes one message as pubsub's JSON envelope (pubsub.Message),
// with a fresh id: the same wire form on both transports.
func envelope(from string, term int64, msgType string, payload any, now time.Time) (id string, data []byte, err error) {
	if err := checkName("message type", msgType); err != nil {
		return "", nil, err
	}
	raw, err := encodePayload(payload)
	if err != nil {
		return "", nil, err
	}
	id = uuid.NewString()
	data, err = pubsub.Message{ID: id, From: from, Term: term, Type: msgType, Payload: raw, SentAt: now.Truncate(time.Millisecond)}.MarshalJSON()
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", pubsub.ErrInvalidPayload, err)
	}
	if len(data) > pubsub.MaxEnvelopeSize {
		return "", nil, fmt.Errorf("%w: envelope is %d bytes, the limit is %d", pubsub.ErrPayloadTooLarge, len(data), pubsub.MaxEnvelopeSize)
	}
	return id, data, nil
}

// encodePayload turns what a caller passes into raw JSON as pubsub's
// senders do: json.RawMessage as it is (Message.MarshalJSON validates and
// compacts it), nil as null, anything else through json.Marshal.
func encodePayload(p any) (json.RawMessage, error) {
	var raw json.RawMessage
	switch v := p.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, fmt.Errorf("%w: json.RawMessage is not valid JSON", pubsub.ErrInvalidPayload)
		}
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", pubsub.ErrInvalidPayload, err)
		}
		raw = b
	}
	if len(raw) > pubsub.MaxPayloadSize {
		return nil, fmt.Errorf("%w: payload is %d bytes, the limit is %d", pubsub.ErrPayloadTooLarge, len(raw), pubsub.MaxPayloadSize)
	}
	return raw, nil
}
