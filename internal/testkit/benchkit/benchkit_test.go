package benchkit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 … 1, unsorted on purpose
	}
	tests := []struct {
		name     string
		in       []time.Duration
		want     Summary
		unsorted bool
	}{
		{name: "empty", in: nil, want: Summary{}},
		{name: "one", in: ms(7), want: Summary{N: 1, P50: 7 * time.Millisecond, P99: 7 * time.Millisecond, Min: 7 * time.Millisecond, Max: 7 * time.Millisecond}},
		{name: "even count takes the lower middle", in: ms(4, 1, 3, 2), want: Summary{N: 4, P50: 2 * time.Millisecond, P99: 4 * time.Millisecond, Min: time.Millisecond, Max: 4 * time.Millisecond}},
		{name: "hundred", in: ms(hundred...), want: Summary{N: 100, P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Min: time.Millisecond, Max: 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tt.in...)
			if got := Summarize(tt.in); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
			for i := range before {
				if before[i] != tt.in[i] {
					t.Fatalf("Summarize modified its input")
				}
			}
		})
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_get:calls=12,usec=3,usec_per_call=0.25,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=7,usec=87,usec_per_call=12.4,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.5,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_broken:calls=x\r\n" +
		"garbage line\r\n"
	got := ParseCommandStats(info)
	want := CommandStats{"get": 12, "evalsha": 7, "client|setinfo": 2}
	if len(got) != len(want) {
		t.Fatalf("ParseCommandStats = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("calls of %s = %d, want %d", k, got[k], v)
		}
	}
	before := CommandStats{"get": 10, "evalsha": 7}
	d := got.Sub(before)
	if d["get"] != 2 || d["client|setinfo"] != 2 || len(d) != 2 {
		t.Errorf("Sub = %v, want get 2, client|setinfo 2", d)
	}
	if tot := d.Total("client|setinfo"); tot != 2 {
		t.Errorf("Total without client|setinfo = %d, want 2", tot)
	}
}

func TestCPUModel(t *testing.T) {
	cpuinfo := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if got := CPUModel(cpuinfo); got != "AMD EPYC 7B13" {
		t.Errorf("CPUModel = %q", got)
	}
	if got := CPUModel("processor: 0\n"); got != "" {
		t.Errorf("CPUModel without a model name = %q, want empty", got)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{500 * time.Nanosecond, "500ns"},
		{41234 * time.Nanosecond, "41.2µs"},
		{1250 * time.Microsecond, "1.25ms"},
		{912 * time.Millisecond, "912ms"},
		{1030 * time.Millisecond, "1.03s"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.d); got != tt.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := FormatRatio(1234.5); got != "1234×" {
		t.Errorf("FormatRatio(1234.5) = %q", got)
	}
	for n, want := range map[int64]string{512: "512 B", 1126: "1.10 KiB", 12800: "12.5 KiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSplice(t *testing.T) {
	m := Markers{Begin: "<!-- x:begin -->", End: "<!-- x:end -->"}
	withHeading := m
	withHeading.Heading = "## Against its peers"
	gen := "table\n"
	block := m.Begin + "\ntable\n" + m.End
	tests := []struct {
		name, doc, want string
		m               Markers
		wantErr         bool
	}{
		{name: "empty doc", m: m, doc: "", want: "# Performance\n\n" + block + "\n"},
		{name: "doc without markers", m: m, doc: "# Perf\n\nintro\n", want: "# Perf\n\nintro\n\n" + block + "\n"},
		{name: "doc without markers, heading", m: withHeading, doc: "# Perf\n\nintro\n", want: "# Perf\n\nintro\n\n## Against its peers\n\n" + block + "\n"},
		{name: "replaces between markers, keeps the rest", m: m, doc: "# P\n" + m.Begin + "\nold\nstuff\n" + m.End + "\n\n## Analysis\nkept\n", want: "# P\n" + block + "\n\n## Analysis\nkept\n"},
		{name: "heading not repeated", m: withHeading, doc: "# P\n\n## Against its peers\n\n" + m.Begin + "\nold\n" + m.End + "\nafter\n", want: "# P\n\n## Against its peers\n\n" + block + "\nafter\n"},
		{name: "begin only", m: m, doc: m.Begin + "\nold\n", wantErr: true},
		{name: "end before begin", m: m, doc: m.End + "\n" + m.Begin + "\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Splice(tt.doc, gen, tt.m)
			if tt.wantErr {
				if !errors.Is(err, ErrMarkers) {
					t.Fatalf("Splice error = %v, want ErrMarkers", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Splice = %q, %v\nwant %q", got, err, tt.want)
			}
		})
	}
}

func TestTable(t *testing.T) {
	tab := Table{
		Header: []string{"#", "what"},
		Rows: []Row{
			{Cells: []string{"1", "a | b"}, Label: "1", Note: NoteText(nil, "measured so")},
			{Cells: []string{"2", "c"}, Label: "2", Note: NoteText(errors.New("boom"), "measured so")},
			{Cells: []string{"3", "d"}, Label: "3"},
			{Cells: []string{"4a", "e"}, Label: "4a", Group: "4a-4b", GroupNote: "both so", Note: NoteText(errors.New("bang"), "")},
			{Cells: []string{"4b", "f"}, Label: "4b"},
		},
	}
	md := tab.Markdown("Generated by a test.", []Fact{{Name: "date", Value: "today"}, {Name: "server", Value: "x | y"}})
	for _, want := range []string{
		"Generated by a test.\n\n| run | |\n|---|---|\n| date | today |\n| server | x \\| y |\n",
		"| # | what |\n|---|---|\n| 1 | a \\| b |\n",
		"- **1** measured so\n",
		"- **2** failed: boom. measured so\n",
		"- **4a-4b** both so\n- **4a** failed: bang\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "**3**") {
		t.Errorf("markdown has a note for a row without one:\n%s", md)
	}
	var b strings.Builder
	if err := tab.WriteText(&b, "footer"); err != nil {
		t.Fatal(err)
	}
	want := "#   what\n1   a | b\n2   c\n3   d\n4a  e\n4b  f\n\nfooter\n  [1] measured so\n  [2] failed: boom. measured so\n  [4a-4b] both so\n  [4a] failed: bang\n"
	if b.String() != want {
		t.Errorf("text =\n%s\nwant\n%s", b.String(), want)
	}
}

func TestMachineString(t *testing.T) {
	m := Machine{CPUs: 2, CPUModel: "Some CPU", OS: "linux", Arch: "amd64"}
	if got := m.String(); got != "2 CPUs (nproc), Some CPU, linux/amd64" {
		t.Errorf("String = %q", got)
	}
	m.LoadAvg = "0.50 0.40 0.30"
	if got := m.String(); got != "2 CPUs (nproc), Some CPU, linux/amd64; load average 0.50 0.40 0.30 at start (the machine is shared)" {
		t.Errorf("String with a load = %q", got)
	}
}

func TestCommandUsec(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_get:calls=12,usec=3,usec_per_call=0.25,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=7,usec=87,usec_per_call=12.4,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_broken:calls=x\r\n"
	if calls, usec, ok := CommandUsec(info, "evalsha"); !ok || calls != 7 || usec != 87 {
		t.Errorf("CommandUsec(evalsha) = %d, %d, %v; want 7, 87, true", calls, usec, ok)
	}
	for _, cmd := range []string{"broken", "ping", "client"} {
		if _, _, ok := CommandUsec(info, cmd); ok {
			t.Errorf("CommandUsec(%s) found, want not found", cmd)
		}
	}
}
