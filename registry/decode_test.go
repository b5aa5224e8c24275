package registry

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/scripts"
)

// TestFastDecodeTakesHerdsForm checks that what herd writes is read by the
// fast path, not by the fallback, and read back unchanged.
func TestFastDecodeTakesHerdsForm(t *testing.T) {
	at := time.Date(2026, 2, 28, 23, 59, 59, 999e6, time.UTC)
	for _, p := range []ProcessInfo{
		{ProcessID: "a", NodeID: "a", Role: RoleSlave},
		{ProcessID: "w-1", NodeID: "w-1", Role: RoleSlave, LastSeen: at, RegisteredAt: at.Add(-time.Hour),
			Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 100, PreferredWorkload: 50},
			Identifier:   "worker é", Metadata: map[string]any{"zone": "b", "n": 1.5, "l": []any{"}", "\"{"}}},
		{ProcessID: "m", NodeID: "m", Role: RoleMaster, LastSeen: time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), Term: 1772600767123,
			Capabilities: Capabilities{MaxSubscriptions: -3}, Version: 1772600767123456},
		{ProcessID: "v", NodeID: "v", Role: RoleSlave, Version: 1},
	} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := fastDecode(string(b))
		if !ok {
			t.Errorf("fast path refused herd's own form %s", b)
			continue
		}
		if got := w; !sameInfo(got, p) {
			t.Errorf("fast path read %s as\n%+v\nwant %+v", b, got, p)
		}
		// The literal reading takes it too, and so does it once the
		// registry script has appended the version.
		for _, v := range []string{string(b), strings.TrimSuffix(string(b), "}") + `,"version":1772600767123457}`} {
			if p.Version != 0 && v != string(b) {
				continue
			}
			want := p
			if v != string(b) {
				want.Version = 1772600767123457
			}
			if got, ok := herdsForm(v); !ok || !sameInfo(got, want) {
				t.Errorf("herdsForm(%s) = %+v, %v; want %+v, true", v, got, ok, want)
			}
		}
	}
	// Other orders and spacing are fastDecode's member-by-member reading.
	for _, v := range []string{
		`{"nodeId":"a","processId":"a","role":"slave","lastSeen":"","capabilities":{"canProcessDetections":false,"maxSubscriptions":0,"preferredWorkload":0}}`,
		`{"processId":"a", "nodeId":"a","role":"slave","lastSeen":"","capabilities":{"canProcessDetections":false,"maxSubscriptions":0,"preferredWorkload":0}}`,
		`{"processId":"a","nodeId":"a","role":"slave","lastSeen":"","capabilities":{"canProcessDetections":false,"maxSubscriptions":0,"preferredWorkload":0},"version":1,"term":2}`,
	} {
		if _, ok := herdsForm(v); ok {
			t.Errorf("herdsForm took %s, which is not in MarshalJSON's order", v)
		}
		if _, ok := fastDecode(v); !ok {
			t.Errorf("fastDecode refused %s", v)
		}
	}
}

// TestFastDecodeDefers lists forms the fast path must leave to
// encoding/json, which accepts or refuses them with its own rules.
func TestFastDecodeDefers(t *testing.T) {
	for _, v := range []string{
		`{"ProcessId":"a","role":"slave"}`,                                   // case-insensitive match
		`{"processId":"a","processId":"b","role":"slave"}`,                   // repeated member
		`{"processId":"a\u0062","role":"slave"}`,                             // escape
		`{"processId":"a","role":"slave","lastSeen":1772600767123}`,          // milliseconds
		`{"processId":"a","role":"slave","lastSeen":"2026-03-04T05:06:07Z"}`, // other layout
		`{"processId":"a","role":"slave","lastSeen":"2026-02-30T05:06:07.000Z"}`,
		`{"processId":"a","role":"slave","term":1.0}`,
		`{"processId":"a","role":"slave","term":01}`,
		`{"processId":"a","role":"slave","version":1.5}`,
		`{"processId":"a","role":"slave","version":1e3}`,
		`{"processId":"a","role":"slave","version":1,"version":2}`,
		`{"processId":"a","role":"slave","Version":1}`,
		`{"processId":"a","role":"slave","capabilities":{"maxSubscriptions":1e3}}`,
		`{"processId":"a","role":"slave","capabilities":null}`,
		`{"processId":"a","role":"slave","extra":1}`,
		"{\"processId\":\"a\xff\",\"role\":\"slave\"}",
		`{"processId":"a","role":"slave"} x`,
		`{"processId":"a","role":"slave","metadata":{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}}`, // deeper than encoding/json takes
		`{"processId":"a","role":"slave",}`,
	} {
		if w, ok := fastDecode(v); ok {
			t.Errorf("fast path took %s as %+v; it must defer", v, w)
		}
	}
}

// FuzzFastDecode checks the fast path against encoding/json: whatever it
// accepts, encoding/json accepts with the same result.
func FuzzFastDecode(f *testing.F) {
	for _, seed := range []string{
		`{"processId":"a","nodeId":"a","role":"slave","lastSeen":"2026-03-04T05:06:07.123Z","capabilities":{"canProcessDetections":true,"maxSubscriptions":4,"preferredWorkload":70}}`,
		`{"processId":"m","role":"master","identifier":"svc","registeredAt":"2026-03-04T05:06:07.000Z","metadata":{"n":1.5,"l":[1,"x",null],"o":{"}":"]"}},"term":1772600767123}`,
		` { "processId" : "a" , "role" : "slave" , "metadata" : null } `,
		`{}`,
		`{"capabilities":{}}`,
		`{"metadata":{"a":"\"}"}}`,
		`{"metadata":{"a":[}}`,
		`{"term":-0}`,
		`{"term":999999999999999999}`,
		`{"processId":"a","role":"slave","lastSeen":"2026-03-04T05:06:07.123Z","capabilities":{"canProcessDetections":false,"maxSubscriptions":0,"preferredWorkload":0},"version":1772600767123456}`,
		`{"version":-1}`,
		`{"version":9999999999999999999}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		w, ok := fastDecode(value)
		if !ok {
			return
		}
		var want processJSON
		if err := json.Unmarshal([]byte(value), &want); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", value, err)
		}
		if got, exp := w, want.info(); !sameInfo(got, exp) {
			t.Fatalf("fast path read %q as\n%+v\nencoding/json as\n%+v", value, got, exp)
		}
	})
}

// sameInfo compares two ProcessInfos, times by the instant they name.
func sameInfo(a, b ProcessInfo) bool {
	if !a.LastSeen.Equal(b.LastSeen) || !a.RegisteredAt.Equal(b.RegisteredAt) {
		return false
	}
	a.LastSeen, b.LastSeen, a.RegisteredAt, b.RegisteredAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// BenchmarkDecodeProcess decodes one entry as herd writes it, through the
// fast path and through encoding/json.
func BenchmarkDecodeProcess(b *testing.B) {
	at := time.Date(2026, 11, 22, 5, 6, 7, 123e6, time.UTC)
	v, err := json.Marshal(ProcessInfo{ProcessID: "proc-01234", NodeID: "proc-01234", Role: RoleSlave, LastSeen: at, RegisteredAt: at,
		Identifier: "worker", Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 100, PreferredWorkload: 50}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeProcess("proc-01234", string(v)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var w processJSON
			if err := json.Unmarshal(v, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWithLastSeen checks the heartbeat's patch of an encoded entry against
// encoding the whole entry, and that it declines what it cannot patch.
func TestWithLastSeen(t *testing.T) {
	p := ProcessInfo{ProcessID: "a", NodeID: "a", Role: RoleSlave, Identifier: `"lastSeen":"`,
		LastSeen: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC), Metadata: map[string]any{"k": "v"}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	at := lastSeenAt(b)
	p.LastSeen = time.Date(2027, 12, 31, 23, 59, 59, 987654321, time.FixedZone("X", -3600))
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := withLastSeen(b, at, p.LastSeen); string(got) != string(want) {
		t.Errorf("patched entry = %s\nwant            %s", got, want)
	}
	if got := withLastSeen(b, at, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); got != nil {
		t.Errorf("a year past 9999 was patched into %s", got)
	}
	zero := ProcessInfo{ProcessID: "a", Role: RoleSlave}
	zb, err := json.Marshal(zero)
	if err != nil {
		t.Fatal(err)
	}
	if at := lastSeenAt(zb); at != 0 {
		t.Errorf("lastSeenAt found a patchable timestamp in %s at %d", zb, at)
	}
}

// BenchmarkSnapshot10k is Processes()'s work after the read: 10,000
// entries as herd writes them, sorted and decoded.
func BenchmarkSnapshot10k(b *testing.B) {
	at := time.Date(2026, 11, 22, 5, 6, 7, 123e6, time.UTC)
	view := scripts.RegistryView{Entries: map[string]string{}}
	for i := range 10000 {
		id := fmt.Sprintf("p-%d", i)
		v, err := json.Marshal(ProcessInfo{ProcessID: id, NodeID: id, Role: RoleSlave, LastSeen: at, RegisteredAt: at, Version: 1764048000000 + int64(i),
			Identifier: "herdbench", Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 100, PreferredWorkload: 50}})
		if err != nil {
			b.Fatal(err)
		}
		view.Entries[id] = string(v)
	}
	r := &Registry{reported: map[string]uint64{}}
	b.ReportAllocs()
	for b.Loop() {
		if snap := r.snapshotOf(view); len(snap.infos) != len(view.Entries) {
			b.Fatalf("%d entries decoded, want %d", len(snap.infos), len(view.Entries))
		}
	}
}

// TestSnapshotOrderFollowsTheIDs checks the sorted ids that snapshotOf
// keeps from one read to the next: a read with other ids, as many or not,
// small or decoded in parallel, is sorted again, and a corrupt entry is
// still left out.
func TestSnapshotOrderFollowsTheIDs(t *testing.T) {
	at := time.Date(2026, 11, 22, 5, 6, 7, 123e6, time.UTC)
	view := func(ids ...string) scripts.RegistryView {
		v := scripts.RegistryView{Entries: map[string]string{}}
		for _, id := range ids {
			b, err := json.Marshal(ProcessInfo{ProcessID: id, NodeID: id, Role: RoleSlave, LastSeen: at, RegisteredAt: at})
			if err != nil {
				t.Fatal(err)
			}
			v.Entries[id] = string(b)
		}
		return v
	}
	many := func(n int, skip string, extra ...string) []string {
		var ids []string
		for i := range n {
			if id := fmt.Sprintf("p-%05d", i); id != skip {
				ids = append(ids, id)
			}
		}
		return append(ids, extra...)
	}
	r := &Registry{reported: map[string]uint64{}}
	for _, tt := range []struct {
		name string
		view scripts.RegistryView
		want []string
	}{
		{"first read", view("c", "a", "b"), []string{"a", "b", "c"}},
		{"same ids", view("b", "c", "a"), []string{"a", "b", "c"}},
		{"one replaced", view("a", "d", "c"), []string{"a", "c", "d"}},
		{"one gone", view("d", "a"), []string{"a", "d"}},
		{"one more", view("d", "a", "b"), []string{"a", "b", "d"}},
		{"parallel", view(many(3000, "")...), many(3000, "")},
		{"parallel, same ids", view(many(3000, "")...), many(3000, "")},
		{"parallel, last replaced", view(many(3000, "p-02999", "p-03000")...), many(3001, "p-02999")},
		{"parallel, first replaced", view(many(3001, "p-00000")...), many(3001, "p-00000")},
	} {
		snap := r.snapshotOf(tt.view)
		var got []string
		for i, p := range snap.infos {
			got = append(got, p.ProcessID)
			if snap.raws[i] != tt.view.Entries[p.ProcessID] {
				t.Fatalf("%s: raw of %s is not its entry", tt.name, p.ProcessID)
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Fatalf("%s: ids %v, want %v", tt.name, got, tt.want)
		}
	}
	v := view("a", "b", "c")
	v.Entries["b"] = `{"processId":"x"}`
	if snap := r.snapshotOf(v); len(snap.infos) != 2 || snap.infos[0].ProcessID != "a" || snap.infos[1].ProcessID != "c" {
		t.Fatalf("with b corrupt: %+v", snap.infos)
	}
}
