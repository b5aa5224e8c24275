package bench

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/benchkit"
)

func TestServerCPU(t *testing.T) {
	tests := []struct {
		name    string
		info    string
		want    float64
		wantErr bool
	}{
		{name: "both", info: "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n", want: 3.75},
		{name: "missing user", info: "used_cpu_sys:1.5\r\n", wantErr: true},
		{name: "not a number", info: "used_cpu_sys:x\r\nused_cpu_user:1\r\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ServerCPU(tt.info)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ServerCPU = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestServerVersion(t *testing.T) {
	tests := []struct{ name, info, want string }{
		{"redis", "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis-7.0.15"},
		{"valkey reports its own version", "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n", "valkey-9.1.2"},
		{"nothing", "", "redis-unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serverVersion(tt.info); got != tt.want {
				t.Errorf("serverVersion = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRowCells(t *testing.T) {
	ping := 50 * time.Microsecond
	tests := []struct {
		name string
		row  Row
		want []string
	}{
		{
			name: "latency",
			row:  Row{ID: "2b", What: "renew", N: 10, P50: 75 * time.Microsecond, P99: 200 * time.Microsecond, Goal: "≤ 1.5× PING"},
			want: []string{"2b", "renew", "10", "75.0µs", "200µs", "1.50× / 4.00×", "≤ 1.5× PING"},
		},
		{
			name: "latency with TTL",
			row:  Row{ID: "5a", What: "failover", N: 2, P50: 900 * time.Millisecond, P99: time.Second, TTL: time.Second},
			want: []string{"5a", "failover", "2", "900ms (0.90 × TTL)", "1.00s (1.00 × TTL)", "18000× / 20000×", "—"},
		},
		{
			name: "value",
			row:  Row{ID: "10a", What: "round trips", N: 10, Value: "21.0 /min"},
			want: []string{"10a", "round trips", "10", "21.0 /min", "—", "—", "—"},
		},
		{
			name: "pending",
			row:  Row{ID: "6", What: "registration", N: 5, Pending: true},
			want: []string{"6", "registration", "—", "not measured yet", "—", "—", "—"},
		},
		{
			name: "failed",
			row:  Row{ID: "3", What: "contended", Err: errors.New("boom")},
			want: []string{"3", "contended", "—", "failed (see note)", "—", "—", "—"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.row.cells(ping)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("cells =\n  %q\nwant\n  %q", got, tt.want)
			}
		})
	}
}

func TestReportMarkdown(t *testing.T) {
	rep := Report{
		Machine: benchkit.Machine{CPUs: 2, CPUModel: "Some CPU", OS: "linux", Arch: "amd64", GoVersion: "go1.26", Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)},
		Server:  "redis-7.0.15 started by herdbench",
		Ping:    40 * time.Microsecond,
		Rows: []Row{
			{ID: "1", What: "PING", N: 3, P50: 40 * time.Microsecond, P99: 80 * time.Microsecond, Note: "a | b"},
			{ID: "3", What: "contended", Err: errors.New("no master")},
		},
	}
	md := rep.Markdown()
	for _, want := range []string{
		"| date | 2026-01-02 03:04 UTC |",
		"| machine | 2 CPUs (nproc), Some CPU, linux/amd64 |",
		"| 1 | PING | 3 | 40.0µs | 80.0µs | 1.00× / 2.00× | — |",
		"| 3 | contended | — | failed (see note) |",
		`- **1** a \| b`,
		"- **3** failed: no master",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if err := rep.Err(); !errors.Is(err, ErrPartial) || !strings.Contains(err.Error(), "3") {
		t.Errorf("Err = %v, want ErrPartial naming row 3", err)
	}
	rep.Rows = rep.Rows[:1]
	if err := rep.Err(); err != nil {
		t.Errorf("Err with no failed row = %v", err)
	}
}

func TestSortRowsAndLetter(t *testing.T) {
	rows := []Row{{ID: "10a"}, {ID: "2b"}, {ID: "11a"}, {ID: "2a"}, {ID: "1"}, {ID: "9b"}}
	sortRows(rows)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, " "); got != "1 2a 2b 9b 10a 11a" {
		t.Errorf("sorted ids = %s", got)
	}
	lettered := letter("7", []Row{{}, {}, {}})
	if lettered[0].ID != "7a" || lettered[2].ID != "7c" {
		t.Errorf("letter gave %q … %q", lettered[0].ID, lettered[2].ID)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{7: "7", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseAddr(t *testing.T) {
	tests := []struct {
		name, addr, wantAddr string
		wantErr              bool
	}{
		{name: "host:port", addr: "127.0.0.1:6379", wantAddr: "127.0.0.1:6379"},
		{name: "url", addr: "redis://127.0.0.1:6390/2", wantAddr: "127.0.0.1:6390"},
		{name: "no port", addr: "localhost", wantErr: true},
		{name: "bad url", addr: "redis://a b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseAddr(tt.addr)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseAddr(%q) = %v, want an error", tt.addr, o.Addr)
				}
				return
			}
			if err != nil || o.Addr != tt.wantAddr || !o.ContextTimeoutEnabled {
				t.Errorf("ParseAddr(%q) = %+v, %v", tt.addr, o, err)
			}
		})
	}
	e := NewEnv(ClientOptions("127.0.0.1:1"))
	if a, b := e.LockName("x"), e.LockName("x"); a == b || !strings.HasPrefix(a, e.Prefix) {
		t.Errorf("LockName gave %q and %q for prefix %q", a, b, e.Prefix)
	}
}

func TestGroup(t *testing.T) {
	rows := group("measured alike", []Row{{ID: "9f", Note: "own"}, {ID: "9g", Err: errors.New("boom")}, {ID: "9h"}})
	if rows[0].Group != "9f-9h" || rows[0].GroupNote != "measured alike" || rows[1].Group != "" {
		t.Errorf("group gave %+v", rows)
	}
	if one := group("alone", []Row{{ID: "8"}}); one[0].Group != "8" {
		t.Errorf("group of one row labelled %q", one[0].Group)
	}
	md := Report{Rows: rows}.Markdown()
	want := "- **9f-9h** measured alike\n- **9f** own\n- **9g** failed: boom\n"
	if !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
}
