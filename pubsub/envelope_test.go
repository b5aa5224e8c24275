package pubsub_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/pubsub"
)

func TestMessageUnmarshal(t *testing.T) {
	big := `"` + strings.Repeat("x", pubsub.MaxPayloadSize) + `"`
	tests := []struct {
		name    string
		in      string
		wantErr error  // nil: must decode
		errHas  string // substring of the error
		check   func(t *testing.T, m pubsub.Message)
	}{
		{name: "full", in: `{"id":"m1","from":"n1","term":7,"type":"assign","payload":{"camera":3},"sentAt":"2025-11-22T00:06:40.123Z"}`,
			check: func(t *testing.T, m pubsub.Message) {
				want := time.Date(2025, 11, 22, 0, 6, 40, 123e6, time.UTC)
				if m.ID != "m1" || m.From != "n1" || m.Term != 7 || m.Type != "assign" || string(m.Payload) != `{"camera":3}` || !m.SentAt.Equal(want) {
					t.Errorf("decoded %+v", m)
				}
			}},
		{name: "no payload is null, no sentAt is zero", in: `{"id":"m1","from":"n1","term":0,"type":"t"}`,
			check: func(t *testing.T, m pubsub.Message) {
				if string(m.Payload) != "null" || !m.SentAt.IsZero() {
					t.Errorf("decoded %+v", m)
				}
			}},
		{name: "unknown members are ignored", in: `{"id":"m1","from":"n1","term":1,"type":"t","trace":"abc","payload":[1]}`,
			check: func(t *testing.T, m pubsub.Message) {
				if string(m.Payload) != "[1]" {
					t.Errorf("payload %s", m.Payload)
				}
			}},
		{name: "sentAt with nanoseconds and offset", in: `{"id":"m","from":"n","term":1,"type":"t","sentAt":"2025-11-22T01:06:40.123456789+01:00"}`,
			check: func(t *testing.T, m pubsub.Message) {
				if want := time.Date(2025, 11, 22, 0, 6, 40, 123456789, time.UTC); !m.SentAt.Equal(want) {
					t.Errorf("sentAt %v", m.SentAt)
				}
			}},
		{name: "sentAt as milliseconds", in: `{"id":"m","from":"n","term":1,"type":"t","sentAt":1763770000123}`,
			check: func(t *testing.T, m pubsub.Message) {
				if m.SentAt.UnixMilli() != 1763770000123 {
					t.Errorf("sentAt %v", m.SentAt)
				}
			}},
		{name: "payload just at the limit", in: `{"id":"m","from":"n","term":1,"type":"t","payload":` + big[:pubsub.MaxPayloadSize-1] + `"}`},

		{name: "not JSON", in: `hello`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "not a JSON object"},
		{name: "JSON array", in: `[1,2]`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "not a JSON object"},
		{name: "null", in: `null`, wantErr: pubsub.ErrMalformedEnvelope},
		{name: "truncated", in: `{"id":"m","from":"n"`, wantErr: pubsub.ErrMalformedEnvelope},
		{name: "missing id", in: `{"from":"n","term":1,"type":"t"}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "id is empty"},
		{name: "missing from", in: `{"id":"m","term":1,"type":"t"}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "from is empty"},
		{name: "missing type", in: `{"id":"m","from":"n","term":1}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "type is empty"},
		{name: "type with a glob character", in: `{"id":"m","from":"n","term":1,"type":"a*"}`, wantErr: pubsub.ErrInvalidName, errHas: "glob"},
		{name: "from with a space", in: `{"id":"m","from":"n 1","term":1,"type":"t"}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "whitespace"},
		{name: "type too long", in: `{"id":"m","from":"n","term":1,"type":"` + strings.Repeat("t", pubsub.MaxNameLen+1) + `"}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "the limit is 256"},
		{name: "negative term", in: `{"id":"m","from":"n","term":-3,"type":"t"}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "negative"},
		{name: "fractional term", in: `{"id":"m","from":"n","term":1.5,"type":"t"}`, wantErr: pubsub.ErrMalformedEnvelope},
		{name: "term as a string", in: `{"id":"m","from":"n","term":"7","type":"t"}`, wantErr: pubsub.ErrMalformedEnvelope},
		{name: "term beyond int64", in: `{"id":"m","from":"n","term":99999999999999999999,"type":"t"}`, wantErr: pubsub.ErrMalformedEnvelope},
		{name: "payload over the limit", in: `{"id":"m","from":"n","term":1,"type":"t","payload":` + big + `}`, wantErr: pubsub.ErrPayloadTooLarge, errHas: "limit is 1048576"},
		{name: "envelope over the limit", in: `{"id":"m","from":"n","term":1,"type":"t","payload":` + big + `,"pad":"` + strings.Repeat(" ", 20<<10) + `"}`, wantErr: pubsub.ErrPayloadTooLarge, errHas: "envelope is"},
		{name: "sentAt garbage", in: `{"id":"m","from":"n","term":1,"type":"t","sentAt":"yesterday"}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "RFC 3339"},
		{name: "sentAt object", in: `{"id":"m","from":"n","term":1,"type":"t","sentAt":{}}`, wantErr: pubsub.ErrMalformedEnvelope, errHas: "sentAt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := pubsub.ParseMessage([]byte(tt.in))
			var viaJSON pubsub.Message
			if jerr := json.Unmarshal([]byte(tt.in), &viaJSON); (jerr == nil) != (err == nil) {
				t.Errorf("json.Unmarshal disagrees with ParseMessage: %v vs %v", jerr, err)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tt.check != nil {
					tt.check(t, m)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("error %q does not mention %q", err, tt.errHas)
			}
		})
	}
}

func TestMessageMarshal(t *testing.T) {
	m := pubsub.Message{ID: "m1", From: "n1", Term: 1763770000123, Type: "assign",
		Payload: json.RawMessage(`{"camera":3}`), SentAt: time.Date(2025, 11, 22, 1, 6, 40, 123456789, time.FixedZone("", 3600))}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":"m1","from":"n1","term":1763770000123,"type":"assign","payload":{"camera":3},"sentAt":"2025-11-22T00:06:40.123Z"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back pubsub.Message
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.ID != m.ID || back.Term != m.Term || !back.SentAt.Equal(m.SentAt.Truncate(time.Millisecond)) {
		t.Errorf("round trip gave %+v", back)
	}

	var p struct{ Camera int }
	if err := back.Decode(&p); err != nil || p.Camera != 3 {
		t.Errorf("Decode: %+v, %v", p, err)
	}
	if err := back.Decode(new(string)); err == nil || !strings.Contains(err.Error(), `"assign"`) {
		t.Errorf("Decode into the wrong type: %v", err)
	}

	empty, err := json.Marshal(pubsub.Message{ID: "m", From: "n", Type: "t"})
	if err != nil || string(empty) != `{"id":"m","from":"n","term":0,"type":"t","payload":null,"sentAt":""}` {
		t.Errorf("zero message: %s, %v", empty, err)
	}
}
