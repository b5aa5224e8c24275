package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/herdkit/herd/internal/testkit/benchkit"
)

// row is one line of the peers table.
type row struct {
	id, what string
	// peer is the peer's name in the table; store is "redis" or "etcd",
	// the store whose round trip the row's ratios are taken against.
	peer, store string
	// s is the row's latency distribution, unless value is set.
	s benchkit.Summary
	// value is the result of a counting row ("26.0 /min"), and x its
	// number, compared with herd's.
	value string
	x     float64
	// ttl, when set, also shows p50 and p99 as multiples of it.
	ttl time.Duration
	// herd is herd's row of the same measurement, when this row is a peer's;
	// goal50 and goal99 are the largest herd ÷ peer ratios the issue accepts
	// (goal99 0: a goal on p50 alone).
	herd           *row
	goal50, goal99 float64
	// goalText and metText, when set, are the goal and met cells of a row
	// whose goal is not a ratio to a peer ("≤ 10µs").
	goalText, metText string
	err               error
	note              string
}

// report is one run.
type report struct {
	machine  benchkit.Machine
	versions []string // "herd <commit>", "etcd v3.7.3", ...
	servers  string
	rt       map[string]benchkit.Summary // store round trip by store
	rtWhat   map[string]string           // how it was taken
	rows     []row
	elapsed  time.Duration
	params   string
}

var header = []string{"#", "measurement", "peer", "n", "p50", "p99", "× store RT (p50÷p50 / p99÷p99)", "herd ÷ peer (p50 / p99)", "goal", "met"}

func (r report) cells(x row) []string {
	out := []string{x.id, x.what, x.peer, "—", "—", "—", "—", "—", "—", "—"}
	switch {
	case x.err != nil:
		out[4] = "failed (see note)"
		return out
	case x.value != "":
		out[3], out[4] = "", x.value
		if x.herd != nil && x.herd.err == nil && x.x > 0 {
			out[7] = benchkit.FormatRatio(x.herd.x / x.x)
		}
	default:
		out[3] = fmt.Sprint(x.s.N)
		out[4], out[5] = benchkit.FormatDuration(x.s.P50), benchkit.FormatDuration(x.s.P99)
		if x.ttl > 0 {
			out[4] += fmt.Sprintf(" (%.2f × TTL)", float64(x.s.P50)/float64(x.ttl))
			out[5] += fmt.Sprintf(" (%.2f × TTL)", float64(x.s.P99)/float64(x.ttl))
		}
		if rt, ok := r.rt[x.store]; ok && rt.P50 > 0 {
			out[6] = ratios(x.s, rt)
		}
		if x.herd != nil && x.herd.err == nil && x.herd.s.N > 0 && x.s.N > 0 {
			out[7] = ratios(x.herd.s, x.s)
		}
	}
	if x.herd != nil && x.goal50 > 0 {
		out[8] = "≤ " + benchkit.FormatRatio(x.goal50)
		switch {
		case x.value != "":
		case x.goal99 > 0:
			out[8] += " / ≤ " + benchkit.FormatRatio(x.goal99)
		default:
			out[8] += " (p50)"
		}
		out[9] = r.met(x)
	}
	if x.goalText != "" {
		out[8], out[9] = x.goalText, x.metText
	}
	return out
}

// met tells whether herd's row meets the goal against x: "yes", "no" or
// "p50 only" / "p99 only".
func (r report) met(x row) string {
	h := x.herd
	if h.err != nil {
		return "—"
	}
	if x.value != "" {
		if x.x > 0 && h.x/x.x <= x.goal50 {
			return "yes"
		}
		return "no"
	}
	if h.s.N == 0 || x.s.N == 0 {
		return "—"
	}
	ok50 := float64(h.s.P50)/float64(x.s.P50) <= x.goal50
	if x.goal99 <= 0 { // a goal on p50 alone
		return metIf(ok50)
	}
	ok99 := float64(h.s.P99)/float64(x.s.P99) <= x.goal99
	switch {
	case ok50 && ok99:
		return "yes"
	case ok50:
		return "p50 only"
	case ok99:
		return "p99 only"
	}
	return "no"
}

// ratios prints a's p50 and p99 as multiples of b's: "2.10× / 1.85×".
func ratios(a, b benchkit.Summary) string {
	return benchkit.FormatRatio(float64(a.P50)/float64(b.P50)) + " / " + benchkit.FormatRatio(float64(a.P99)/float64(b.P99))
}

// table is the run's results table.
func (r report) table() benchkit.Table {
	t := benchkit.Table{Header: header}
	for _, x := range r.rows {
		t.Rows = append(t.Rows, benchkit.Row{Cells: r.cells(x), Label: x.id + ", " + x.peer, Note: benchkit.NoteText(x.err, x.note)})
	}
	return t
}

func (r report) writeText(w io.Writer) error {
	m := r.machine
	footer := []string{fmt.Sprintf("%s; %s; %s; run took %v", m.When(), m, m.GoVersion, r.elapsed.Round(time.Second))}
	for _, st := range []string{"redis", "etcd"} {
		if s, ok := r.rt[st]; ok {
			footer = append(footer, fmt.Sprintf("  %s: p50 %s, p99 %s (n %d)", r.rtWhat[st], benchkit.FormatDuration(s.P50), benchkit.FormatDuration(s.P99), s.N))
		}
	}
	return r.table().WriteText(w, footer...)
}

// markdown is the generated part of docs/performance.md.
func (r report) markdown() string {
	m := r.machine
	facts := []benchkit.Fact{
		{Name: "date", Value: m.When()},
		{Name: "machine", Value: m.String()},
		{Name: "Go", Value: m.GoVersion},
		{Name: "versions", Value: strings.Join(r.versions, ", ")},
		{Name: "servers", Value: r.servers},
	}
	for _, st := range []string{"redis", "etcd"} {
		if s, ok := r.rt[st]; ok {
			facts = append(facts, benchkit.Fact{Name: st + " round trip", Value: fmt.Sprintf("p50 %s, p99 %s (%s, n %d)", benchkit.FormatDuration(s.P50), benchkit.FormatDuration(s.P99), r.rtWhat[st], s.N)})
		}
	}
	facts = append(facts, benchkit.Fact{Name: "parameters", Value: r.params})
	intro := fmt.Sprintf("Generated by `make bench-peers` (bench/peers); %v of measuring.", r.elapsed.Round(time.Second))
	return r.table().Markdown(intro, facts)
}

// markers are the markers around the generated part of docs/performance.md.
var markers = benchkit.Markers{
	Begin:   "<!-- herdpeers:begin (generated by make bench-peers; edit outside the markers) -->",
	End:     "<!-- herdpeers:end -->",
	Heading: "## Against its peers",
}
