package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/operate"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// fixedSnapshot is a snapshot with every kind of content, some too long for
// 80 columns.
func fixedSnapshot() operate.Snapshot {
	seen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := func(id, ident string, role registry.Role, age time.Duration, md map[string]any) operate.Process {
		return operate.Process{Age: age, Info: registry.ProcessInfo{ProcessID: id, NodeID: id, Role: role, Identifier: ident,
			LastSeen: seen, Metadata: md, Capabilities: registry.Capabilities{CanProcessDetections: role == registry.RoleMaster, MaxSubscriptions: 50, PreferredWorkload: 80}}}
	}
	return operate.Snapshot{
		Lock: "orders", Backend: registry.BackendNative, Time: seen,
		Master: &operate.Master{NodeID: "api-1", Identifier: "orders-api", Term: 1767225600123, Held: 123 * time.Second, TTL: 27900 * time.Millisecond},
		Processes: []operate.Process{
			p("api-1", "orders-api", registry.RoleMaster, 850*time.Millisecond, map[string]any{"zone": "eu-west-1", "version": "2.4.1"}),
			p("api-2", "orders-api", registry.RoleSlave, 4200*time.Millisecond, nil),
			p("worker-with-a-rather-long-process-id-7f3a9c", "orders-worker-pool-europe", registry.RoleSlave, 3*time.Hour+2*time.Minute,
				map[string]any{"queues": []any{"emails", "invoices", "refunds"}, "zone": "eu-central-1", "build": map[string]any{"sha": "9f8e7d6c"}}),
		},
		Warnings: []string{
			"worker-with-a-rather-long-process-id-7f3a9c: last heartbeat 3h02m ago, older than the process TTL 45s (its clock is behind the server's, or its TTL is longer than -process-ttl)",
		},
	}
}

func TestStatusTableGolden(t *testing.T) {
	var b bytes.Buffer
	writeStatus(&b, fixedSnapshot(), "redis://127.0.0.1:6379")
	golden(t, "status.golden", b.String())
	var ids []string
	for _, p := range fixedSnapshot().Processes {
		ids = append(ids, p.Info.ProcessID)
	}
	showsIDs(t, b.String(), ids...)

	b.Reset()
	s := fixedSnapshot()
	s.Master, s.Processes, s.Warnings = nil, nil, []string{"no master: nobody holds the lock orders:master"}
	writeStatus(&b, s, "redis://127.0.0.1:6379")
	golden(t, "status_empty.golden", b.String())

	// With priorities, a column after the role shows each one.
	b.Reset()
	s = fixedSnapshot()
	s.Processes[0].Info.Priority, s.Processes[2].Info.Priority = 10, -1
	writeStatus(&b, s, "redis://127.0.0.1:6379")
	golden(t, "status_priority.golden", b.String())
	js, err := json.Marshal(s)
	if err != nil || !bytes.Contains(js, []byte(`"priority":10`)) || bytes.Count(js, []byte(`"priority"`)) != 2 {
		t.Errorf("status JSON (%v) has no priority member for the processes with one: %s", err, js)
	}
}

// showsIDs checks that out shows every id of ids in full, in a cell of
// its own: ids are never cut, however long the line.
func showsIDs(t *testing.T, out string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if !regexp.MustCompile(`(?m)(^|  )` + regexp.QuoteMeta(id) + `(  |$)`).MatchString(out) {
			t.Errorf("id %q is not shown in full:\n%s", id, out)
		}
	}
}

func TestFormatAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "-"}, {0, "0ms"}, {999 * time.Millisecond, "999ms"}, {4250 * time.Millisecond, "4.2s"},
		{42 * time.Second, "42s"}, {123 * time.Second, "2m03s"}, {62 * time.Minute, "1h02m"}, {76 * time.Hour, "3d04h"},
	} {
		if got := operate.FormatAge(tc.d); got != tc.want {
			t.Errorf("FormatAge(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// fixedDeadLetters are dead letters with every kind of content, some too
// long for 80 columns, and one whose envelope cannot be decoded.
func fixedDeadLetters() []operate.DeadLetter {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	dl := func(id, inbox, typ, msgID string, deliveries int64, errText string, age time.Duration) operate.DeadLetter {
		l := operate.DeadLetter{Age: age}
		l.ID, l.Inbox, l.Process, l.Deliveries, l.Error, l.At, l.Term = id, inbox, inbox, deliveries, errText, at, 1767225600123
		if msgID != "" {
			l.Message = pubsub.Message{ID: msgID, From: "api-1", Term: 1767225600123, Type: typ, Payload: json.RawMessage(`{"to":"x@example.com"}`), SentAt: at}
		}
		l.Raw = `{"id":"` + msgID + `"}`
		return l
	}
	return []operate.DeadLetter{
		dl("1767225700123-0", "worker-1", "email", "5b0f7c1e-8d52-4c55-9b1f-3a7e2d9c4f10", 10, "smtp: dial tcp 10.0.0.7:25: connect: connection refused", 123*time.Second),
		dl("1767225700200-3", "worker-with-a-rather-long-process-id-7f3a9c", "invoice-render", "0d9e8f7a-6b5c-4d3e-2f1a-0b9c8d7e6f5a", 3,
			"pubsub: handler panicked: runtime error: index out of range [3] with length 3\ngoroutine 7 [running]", 4200*time.Millisecond),
		dl("1767225700300-0", "worker-2", "", "", 1, "", -1),
	}
}

func TestDeadTableGolden(t *testing.T) {
	var b bytes.Buffer
	deadTable(&b, fixedDeadLetters())
	golden(t, "dead_list.golden", b.String())
	var ids []string
	for _, l := range fixedDeadLetters() {
		ids = append(ids, l.ID, l.Inbox)
		if l.Message.ID != "" {
			ids = append(ids, l.Message.ID)
		}
	}
	showsIDs(t, b.String(), ids...)
	// The JSON has every member, the envelope as sent, and raw only when
	// the envelope cannot be decoded.
	j, err := json.Marshal(fixedDeadLetters())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "dead_list_json.golden", string(j)+"\n")
}

// TestAssignTableShowsIDs: items and slave ids too long for 80 columns are
// shown in full.
func TestAssignTableShowsIDs(t *testing.T) {
	item, slave := "camera-eu-west-1-building-7-floor-3-entrance-north", "backend-worker-eu-west-1-7f3a9c2e1d"
	as := operate.Assignments{Set: "items", Counts: map[string]int{operate.ItemMoving: 1},
		Items:  []operate.ItemState{{Item: item, Planned: slave, Owner: slave + "-old", Left: time.Second, State: operate.ItemMoving}},
		Slaves: []operate.SlaveLoad{{ID: slave, Planned: 1}, {ID: slave + "-old", Owned: 1}}}
	var b bytes.Buffer
	assignTable(&b, as)
	showsIDs(t, b.String(), item, slave, slave+"-old")
}
