package registry

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestProcessInfoJSON(t *testing.T) {
	seen := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("CET", 3600))
	p := ProcessInfo{
		ProcessID: "p1", NodeID: "p1", Role: RoleSlave, LastSeen: seen,
		Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 4, PreferredWorkload: 70},
	}
	// Exactly the specification's form, timestamps as toISOString writes them.
	want := `{"processId":"p1","nodeId":"p1","role":"slave","lastSeen":"2026-03-04T04:06:07.123Z",` +
		`"capabilities":{"canProcessDetections":true,"maxSubscriptions":4,"preferredWorkload":70}}`
	b, err := json.Marshal(p)
	if err != nil || string(b) != want {
		t.Fatalf("Marshal = %s, %v\nwant        %s", b, err, want)
	}

	p.Identifier, p.RegisteredAt, p.Metadata, p.Term = "svc", seen.Add(-time.Hour), map[string]any{"k": "v"}, 9
	b, err = json.Marshal(p)
	wantExt := want[:len(want)-1] + `,"identifier":"svc","registeredAt":"2026-03-04T03:06:07.123Z","metadata":{"k":"v"},"term":9}`
	if err != nil || string(b) != wantExt {
		t.Fatalf("Marshal with extensions = %s, %v\nwant %s", b, err, wantExt)
	}
}

func TestLenientTimestamps(t *testing.T) {
	ms := time.Date(2026, 3, 4, 5, 6, 7, 123e6, time.UTC)
	for _, tc := range []struct {
		name, lastSeen string
		want           time.Time
		ok             bool
	}{
		{"toISOString", `"2026-03-04T05:06:07.123Z"`, ms, true},
		{"no fraction", `"2026-03-04T05:06:07Z"`, ms.Truncate(time.Second), true},
		{"offset and nanoseconds", `"2026-03-04T07:06:07.123000000+02:00"`, ms, true},
		{"milliseconds", `1772600767123`, ms, true},
		{"null", `null`, time.Time{}, true},
		{"empty", `""`, time.Time{}, true},
		{"not a time", `"yesterday"`, time.Time{}, false},
		{"object", `{}`, time.Time{}, false},
		{"six-digit year", `"+010000-01-01T00:00:00.000Z"`, time.Time{}, false},
		{"out of range ms", `1e300`, time.Time{}, false},
		{"year before 0000 by offset", `"0000-01-01T00:00:00+01:00"`, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := decodeProcess("a", `{"processId":"a","role":"slave","lastSeen":`+tc.lastSeen+`}`)
			if tc.ok != (err == nil) {
				t.Fatalf("decode = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && !p.LastSeen.Equal(tc.want) {
				t.Errorf("lastSeen = %s, want %s", p.LastSeen, tc.want)
			}
		})
	}
}

func TestDecodeProcessDefaultsNodeID(t *testing.T) {
	p, err := decodeProcess("a", `{"processId":"a","role":"master"}`)
	if err != nil || p.NodeID != "a" || p.Role != RoleMaster {
		t.Errorf("decode = %+v, %v; want nodeId a", p, err)
	}
}

// TestDecodeProcess reads stored values herd did not write: what
// encoding/json reads is taken, unknown members and member names in another
// case included; the rest is an error saying what is wrong.
func TestDecodeProcess(t *testing.T) {
	for _, tc := range []struct {
		name, field, value string
		want               string // a part of the error; "" when the value is read
	}{
		{"herd's form", "a", `{"processId":"a","nodeId":"a","role":"slave","lastSeen":"2026-03-04T05:06:07.123Z",` +
			`"capabilities":{"canProcessDetections":true,"maxSubscriptions":4,"preferredWorkload":70},"version":3}`, ""},
		{"other order and spacing", "a", ` { "role" : "slave" , "processId" : "a" } `, ""},
		{"unknown member", "a", `{"processId":"a","role":"slave","extra":{"x":[1]}}`, ""},
		{"member name in another case", "a", `{"ProcessId":"a","ROLE":"slave"}`, ""},
		{"escapes", "ab", `{"processId":"a\u0062","role":"slave"}`, ""},
		{"repeated member: the last wins", "b", `{"processId":"a","processId":"b","role":"slave"}`, ""},
		{"master's key, no field", "", `{"processId":"m","role":"master","term":7}`, ""},
		{"not JSON", "a", `{oops`, "invalid character"},
		{"empty", "a", ``, "unexpected end"},
		{"trailing text", "a", `{"processId":"a","role":"slave"} x`, "invalid character"},
		{"trailing comma", "a", `{"processId":"a","role":"slave",}`, "invalid character"},
		{"array", "a", `[1,2]`, "cannot unmarshal array"},
		{"no processId", "a", `{"role":"slave"}`, "no processId"},
		{"other processId", "a", `{"processId":"b","role":"slave"}`, `processId "b" differs`},
		{"invalid UTF-8", "a", "{\"processId\":\"a\xff\",\"role\":\"slave\"}", "differs from the field name"},
		{"unknown role", "a", `{"processId":"a","role":"boss"}`, `role "boss"`},
		{"term as a string", "a", `{"processId":"a","role":"slave","term":"7"}`, "term"},
		{"term with a fraction", "a", `{"processId":"a","role":"slave","term":1.5}`, "term"},
		{"version out of range", "a", `{"processId":"a","role":"slave","version":9999999999999999999}`, "version"},
		{"capabilities not an object", "a", `{"processId":"a","role":"slave","capabilities":"all"}`, "capabilities"},
		{"count out of range", "a", `{"processId":"a","role":"slave","capabilities":{"maxSubscriptions":1e400}}`, "maxSubscriptions"},
		{"metadata not an object", "a", `{"processId":"a","role":"slave","metadata":[1]}`, "metadata"},
		{"metadata too deep", "a", `{"processId":"a","role":"slave","metadata":{"a":` +
			strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}`, "max depth"},
		{"not a time", "a", `{"processId":"a","role":"slave","lastSeen":"yesterday"}`, "yesterday"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := decodeProcess(tc.field, tc.value)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("decode = %v, want it read", err)
			case tc.want == "" && (p.ProcessID == "" || p.NodeID != p.ProcessID):
				t.Fatalf("decode = %+v, want a processId and the nodeId defaulted to it", p)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("decode = %+v, %v; want an error with %q", p, err, tc.want)
			}
		})
	}
}

// FuzzDecodeProcess checks that decoding a stored value never panics, and
// that whatever it accepts is written back in a form it reads back the same.
// `go test` runs the seeds; `go test -fuzz FuzzDecodeProcess` explores.
func FuzzDecodeProcess(f *testing.F) {
	for _, seed := range []struct{ field, value string }{
		{"a", `{"processId":"a","nodeId":"a","role":"slave","lastSeen":"2026-03-04T05:06:07.123Z","capabilities":{"canProcessDetections":true,"maxSubscriptions":4,"preferredWorkload":70}}`},
		{"m", `{"processId":"m","role":"master","lastSeen":1772600767123,"identifier":"svc","registeredAt":"2026-03-04T05:06:07Z","metadata":{"n":1.5,"l":[1,"x",null],"o":{}},"term":1772600767123}`},
		{"a", `{"processId":"a","role":"slave","lastSeen":null,"metadata":null}`},
		{"a", `{"processId":"a","role":"slave","lastSeen":"2026-03-04T07:06:07.999999999+02:00"}`},
		{"a", `{"processId":"a","role":"slave","lastSeen":-1e3}`},
		{"a", `{oops`},
		{"a", `[1,2]`},
		{"a", `"a"`},
		{"a", `{"processId":"b","role":"slave"}`},
		{"a", `{"processId":"a","role":"boss"}`},
		{"a", `{"processId":"a","role":"slave","capabilities":{"maxSubscriptions":1e400}}`},
		{"a", `{"processId":"a","role":"slave","term":"7"}`},
		{"", `{"processId":"\u00e9\ud800","role":"slave"}`},
		{"a", ``},
	} {
		f.Add(seed.field, seed.value)
	}
	f.Fuzz(func(t *testing.T, field, value string) {
		p, err := decodeProcess(field, value)
		if err != nil {
			return
		}
		b1, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("accepted %q but cannot write it back: %v", value, err)
		}
		p2, err := decodeProcess(field, string(b1))
		if err != nil {
			t.Fatalf("wrote %s for %q and cannot read it back: %v", b1, value, err)
		}
		b2, err := json.Marshal(p2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("written form is not stable:\n%s\n%s (%v)", b1, b2, err)
		}
		if p2.ProcessID != p.ProcessID || p2.Role != p.Role || !reflect.DeepEqual(p2.Capabilities, p.Capabilities) {
			t.Fatalf("round trip changed %+v into %+v", p, p2)
		}
	})
}

// BenchmarkEncodeEntry encodes what a heartbeat writes: the entry of a
// slave, and of a master with its slave form.
func BenchmarkEncodeEntry(b *testing.B) {
	at := time.Date(2026, 11, 22, 5, 6, 7, 123e6, time.UTC)
	for _, role := range []Role{RoleSlave, RoleMaster} {
		b.Run(string(role), func(b *testing.B) {
			info := ProcessInfo{ProcessID: "proc-01234", NodeID: "proc-01234", Role: role, RegisteredAt: at, Identifier: "worker",
				Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 100, PreferredWorkload: 50}}
			if role == RoleMaster {
				info.Term = 1772600767123
			}
			b.ReportAllocs()
			for n := 1; b.Loop(); n++ {
				info.LastSeen = at.Add(time.Duration(n) * time.Millisecond)
				if _, err := encodeEntry(info); err != nil {
					b.Fatal(err)
				}
				if role == RoleMaster {
					if _, err := encodeEntry(asSlave(info)); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
