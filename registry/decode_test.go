package registry

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// TestHerdsForm checks that what herd writes is read by herdsForm, not by
// encoding/json, and read back unchanged, also once the registry script has
// appended the version.
func TestHerdsForm(t *testing.T) {
	at := time.Date(2026, 2, 28, 23, 59, 59, 999e6, time.UTC)
	for _, p := range []ProcessInfo{
		{ProcessID: "a", NodeID: "a", Role: RoleSlave},
		{ProcessID: "w-1", NodeID: "w-1", Role: RoleSlave, LastSeen: at, RegisteredAt: at.Add(-time.Hour),
			Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 100, PreferredWorkload: 50},
			Identifier:   "worker é", Metadata: map[string]any{"zone": "b", "n": 1.5, "l": []any{"}", "\"{"}}},
		{ProcessID: "m", NodeID: "m", Role: RoleMaster, LastSeen: time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), Term: 1772600767123,
			Capabilities: Capabilities{MaxSubscriptions: -3}, Version: 1772600767123456},
		{ProcessID: "v", NodeID: "v", Role: RoleSlave, Version: 1},
		{ProcessID: "p", NodeID: "p", Role: RoleSlave, NonCandidate: true, Priority: 7},
		{ProcessID: "q", NodeID: "q", Role: RoleMaster, Priority: -2, Term: 3},
	} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := herdsForm(string(b)); !ok || !sameInfo(got, p) {
			t.Errorf("herdsForm(%s) = %+v, %v; want %+v, true", b, got, ok, p)
		}
		if p.Version != 0 {
			continue
		}
		v := strings.TrimSuffix(string(b), "}") + `,"version":1772600767123457}`
		want := p
		want.Version = 1772600767123457
		if got, ok := herdsForm(v); !ok || !sameInfo(got, want) {
			t.Errorf("herdsForm(%s) = %+v, %v; want %+v, true", v, got, ok, want)
		}
	}
}

// TestHerdsFormDefers changes one thing at a time in herd's own form and
// checks that herdsForm leaves the result to encoding/json, which accepts or
// refuses it with its own rules.
func TestHerdsFormDefers(t *testing.T) {
	const base = `{"processId":"a","nodeId":"a","role":"slave","lastSeen":"2026-03-04T05:06:07.123Z",` +
		`"capabilities":{"canProcessDetections":false,"maxSubscriptions":0,"preferredWorkload":0},"metadata":{"k":1},"term":2,"version":1}`
	if _, ok := herdsForm(base); !ok {
		t.Fatalf("herdsForm refused herd's form %s", base)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"other member order", `"processId":"a","nodeId":"a"`, `"nodeId":"a","processId":"a"`},
		{"white space", `"nodeId":"a",`, `"nodeId":"a", `},
		{"trailing white space", `"version":1}`, `"version":1} `},
		{"trailing text", `"version":1}`, `"version":1} x`},
		{"trailing comma", `"version":1}`, `"version":1,}`},
		{"unknown member", `"version":1}`, `"version":1,"extra":1}`},
		{"repeated member", `"version":1}`, `"version":1,"version":2}`},
		{"member name in another case", `"processId"`, `"ProcessId"`},
		{"escape", `"processId":"a"`, `"processId":"\u0061"`},
		{"invalid UTF-8", `"processId":"a"`, "\"processId\":\"a\xff\""},
		{"milliseconds", `"2026-03-04T05:06:07.123Z"`, `1772600767123`},
		{"other layout", `"2026-03-04T05:06:07.123Z"`, `"2026-03-04T05:06:07Z"`},
		{"no such day", `"2026-03-04T05:06:07.123Z"`, `"2026-02-30T05:06:07.000Z"`},
		{"fraction", `"term":2`, `"term":2.0`},
		{"leading zero", `"term":2`, `"term":02`},
		{"exponent", `"version":1`, `"version":1e3`},
		{"19 digits", `"version":1`, `"version":1000000000000000000`},
		{"capabilities null", `{"canProcessDetections":false,"maxSubscriptions":0,"preferredWorkload":0}`, `null`},
		{"count with exponent", `"maxSubscriptions":0`, `"maxSubscriptions":1e3`},
		{"priority with fraction", `"term":2`, `"priority":1.5,"term":2`},
		{"priority beyond 32 bits", `"term":2`, `"priority":4294967296,"term":2`},
		{"priority as a string", `"term":2`, `"priority":"1","term":2`},
		{"metadata deeper than encoding/json takes", `{"k":1}`, `{"k":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`},
	} {
		v := strings.Replace(base, tc.old, tc.new, 1)
		if v == base {
			t.Fatalf("%s: %q is not in the base form", tc.name, tc.old)
		}
		if w, ok := herdsForm(v); ok {
			t.Errorf("%s: herdsForm took %s as %+v; it must defer", tc.name, v, w)
		}
	}
}

// FuzzHerdsForm checks herdsForm against encoding/json: whatever it
// accepts, encoding/json accepts with the same result.
func FuzzHerdsForm(f *testing.F) {
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
		`{"processId":"a","nodeId":"a","role":"slave","lastSeen":"","capabilities":{"canProcessDetections":false,"maxSubscriptions":0,"preferredWorkload":0},"nonCandidate":true,"priority":-3,"version":5}`,
		`{"priority":2147483648}`,
		`{"version":9999999999999999999}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		w, ok := herdsForm(value)
		if !ok {
			return
		}
		var want processJSON
		if err := json.Unmarshal([]byte(value), &want); err != nil {
			t.Fatalf("herdsForm accepted %q, encoding/json refuses it: %v", value, err)
		}
		if got, exp := w, want.info(); !sameInfo(got, exp) {
			t.Fatalf("herdsForm read %q as\n%+v\nencoding/json as\n%+v", value, got, exp)
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

// BenchmarkDecodeProcess decodes one entry as herd writes it, through
// herdsForm and through encoding/json.
func BenchmarkDecodeProcess(b *testing.B) {
	at := time.Date(2026, 11, 22, 5, 6, 7, 123e6, time.UTC)
	v, err := json.Marshal(ProcessInfo{ProcessID: "proc-01234", NodeID: "proc-01234", Role: RoleSlave, LastSeen: at, RegisteredAt: at,
		Identifier: "worker", Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 100, PreferredWorkload: 50}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("herdsForm", func(b *testing.B) {
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

// BenchmarkSnapshot10k is Processes()'s work after the read: 10,000
// entries as herd writes them, sorted and decoded.
func BenchmarkSnapshot10k(b *testing.B) {
	at := time.Date(2026, 11, 22, 5, 6, 7, 123e6, time.UTC)
	view := rdb.RegistryView{Entries: map[string]string{}}
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
	view := func(ids ...string) rdb.RegistryView {
		v := rdb.RegistryView{Entries: map[string]string{}}
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
		view rdb.RegistryView
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
