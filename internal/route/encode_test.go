package route_test

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/pubsub"
)

// TestEncodeMatchesMarshal: the envelope Encode writes is, byte for byte,
// the one pubsub.Message.MarshalJSON (encoding/json) writes, for every kind of
// name and payload.
func TestEncodeMatchesMarshal(t *testing.T) {
	now := time.Date(2025, 11, 22, 0, 6, 40, 123456789, time.FixedZone("x", 3600))
	tests := []struct {
		name          string
		id, from, typ string
		term          int64
		payload       any
	}{
		{name: "plain", id: "6f1c2b1e-8a2d-4b0e-9a53-2f4f5cf0e2a1", from: "master-1", typ: "assign", term: 1763770000123, payload: map[string]int{"camera": 3}},
		{name: "nil payload", id: "m", from: "n", typ: "t", payload: nil},
		{name: "raw payload with spaces", id: "m", from: "n", typ: "t", term: 1, payload: json.RawMessage(" [1, 2,\n {\"a\" : \"b c\"}] ")},
		{name: "raw payload with HTML characters", id: "m", from: "n", typ: "t", term: 1, payload: json.RawMessage(`{"x":"<a href='y'>&</a>"}`)},
		{name: "raw payload with line separators", id: "m", from: "n", typ: "t", term: 1, payload: json.RawMessage("\"a\u2028b\u2029c\"")},
		{name: "marshalled HTML string", id: "m", from: "n", typ: "t", term: 1, payload: "<b>&"},
		{name: "names with HTML characters", id: "a<b", from: "c>d", typ: "e&f", term: math.MaxInt64, payload: 1},
		{name: "names beyond ASCII", id: "ü-✓", from: "日本", typ: "tÿpe", term: 2, payload: "é"},
		{name: "names with invalid UTF-8", id: "a\xffb", from: "\xc3", typ: "t\x80", term: 3, payload: json.RawMessage(`"\u00e9"`)},
		{name: "names with quotes and controls", id: "a\"b", from: "c\\d", typ: "e\x01\n", term: 4, payload: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compareEncode(t, tt.id, tt.from, tt.typ, tt.term, tt.payload, now)
		})
	}
}

func compareEncode(t *testing.T, id, from, typ string, term int64, payload any, now time.Time) {
	t.Helper()
	raw, err := route.EncodePayload(payload)
	if err != nil {
		t.Fatalf("EncodePayload(%v): %v", payload, err)
	}
	orig, ok := payload.(json.RawMessage)
	if !ok {
		if orig, err = json.Marshal(payload); err != nil {
			t.Fatal(err)
		}
	}
	want, err := pubsub.Message{ID: id, From: from, Term: term, Type: typ, Payload: orig, SentAt: now}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if got := route.Encode(id, from, term, typ, raw, now); !bytes.Equal(got, want) {
		t.Fatalf("Encode wrote\n%s\nMarshalJSON writes\n%s", got, want)
	}
}

// FuzzEncode: Encode and MarshalJSON agree on any names and any valid JSON
// payload.
func FuzzEncode(f *testing.F) {
	f.Add("m-1", "master", "assign", int64(1763770000123), []byte(`{"a": [1, "<&>"]}`))
	f.Add("a\xff", "\u2028", "\"", int64(-1), []byte(" null "))
	now := time.Date(2025, 11, 22, 0, 6, 40, 123e6, time.UTC)
	f.Fuzz(func(t *testing.T, id, from, typ string, term int64, payload []byte) {
		if !json.Valid(payload) || len(payload) > route.MaxPayloadSize {
			if _, err := route.EncodePayload(json.RawMessage(payload)); err == nil && !json.Valid(payload) {
				t.Fatalf("EncodePayload accepted invalid JSON %q", payload)
			}
			return
		}
		compareEncode(t, id, from, typ, term, json.RawMessage(payload), now)
	})
}
