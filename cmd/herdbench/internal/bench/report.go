package bench

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/herdkit/herd/internal/testkit/benchkit"
)

// Row is one line of the results table.
type Row struct {
	// ID is the row's number in the performance issue, with a letter when
	// one item has several rows ("2a").
	ID string
	// What names the measurement.
	What string
	// N is the number of samples behind P50 and P99 (or behind Value).
	N int
	// P50 and P99 are the row's latency percentiles; zero for value rows.
	P50, P99 time.Duration
	// TTL, when not zero, makes the latency cells also show P50 and P99 as
	// multiples of it.
	TTL time.Duration
	// Value is the result of a row that is not a latency ("21.0 /min");
	// when set, P50 and P99 are ignored.
	Value string
	// Goal is the goal the issue sets, or "".
	Goal string
	// Note says how the row was measured, or what its own numbers are;
	// printed under the table.
	Note string
	// Group and GroupNote, on the first row of a group of rows measured
	// alike (see group), name the group ("7a-7z") and say once how all of
	// it was measured; printed before the row's own note.
	Group, GroupNote string
	// Err is why the measurement failed; the row shows it instead of a result.
	Err error
	// Pending marks a row that cannot be measured yet; it shows
	// "not measured yet" and Note says why.
	Pending bool
}

// LatencyRow makes a row from samples.
func LatencyRow(id, what string, samples []time.Duration, goal, note string) Row {
	s := benchkit.Summarize(samples)
	return Row{ID: id, What: what, N: s.N, P50: s.P50, P99: s.P99, Goal: goal, Note: note}
}

// group gives rows, numbered already, the one note note, printed once
// under the span of their ids ("9f-9j"); each row keeps its own note (its
// own numbers, or its failure).
func group(note string, rows []Row) []Row {
	if len(rows) == 0 || note == "" {
		return rows
	}
	rows[0].Group, rows[0].GroupNote = rows[0].ID, note
	if last := rows[len(rows)-1].ID; last != rows[0].ID {
		rows[0].Group += "-" + last
	}
	return rows
}

// Report is one run: where it ran and what it measured.
type Report struct {
	// Machine is the machine of the run.
	Machine benchkit.Machine
	// Server names the server ("redis-7.0.15") and how it was reached.
	Server string
	// MoreServers are the servers (product and version) row 7 was also
	// measured on.
	MoreServers []string
	// Ping is the PING round trip p50 of the run, the base of every ratio.
	Ping time.Duration
	// Elapsed is how long the run took.
	Elapsed time.Duration
	// Rows are the measurements, in table order.
	Rows []Row
}

// ErrPartial is returned by Report.Err when some rows failed.
var ErrPartial = errors.New("bench: some rows failed")

// Err returns ErrPartial, wrapped with the failing rows, when a row failed.
func (r Report) Err() error {
	var ids []string
	for _, row := range r.Rows {
		if row.Err != nil {
			ids = append(ids, row.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrPartial, strings.Join(ids, ", "))
}

var header = []string{"#", "measurement", "n", "p50", "p99", "× PING p50 (p50 / p99)", "goal"}

// cells returns the table cells of row, ratios taken against ping.
func (row Row) cells(ping time.Duration) []string {
	n := "—"
	if row.N > 0 {
		n = fmt.Sprint(row.N)
	}
	out := []string{row.ID, row.What, n, "", "—", "—", row.Goal}
	switch {
	case row.Pending:
		out[2], out[3] = "—", "not measured yet"
	case row.Err != nil:
		out[2], out[3] = "—", "failed (see note)"
	case row.Value != "":
		out[3] = row.Value
	default:
		out[3], out[4] = benchkit.FormatDuration(row.P50), benchkit.FormatDuration(row.P99)
		if row.TTL > 0 {
			out[3] += fmt.Sprintf(" (%.2f × TTL)", float64(row.P50)/float64(row.TTL))
			out[4] += fmt.Sprintf(" (%.2f × TTL)", float64(row.P99)/float64(row.TTL))
		}
		if ping > 0 {
			out[5] = benchkit.FormatRatio(float64(row.P50)/float64(ping)) + " / " + benchkit.FormatRatio(float64(row.P99)/float64(ping))
		}
	}
	if out[6] == "" {
		out[6] = "—"
	}
	return out
}

// table is the report's results table, ratios taken against the PING p50.
func (r Report) table() benchkit.Table {
	t := benchkit.Table{Header: header}
	for _, row := range r.Rows {
		t.Rows = append(t.Rows, benchkit.Row{Cells: row.cells(r.Ping), Label: row.ID, Note: benchkit.NoteText(row.Err, row.Note),
			Group: row.Group, GroupNote: row.GroupNote})
	}
	return t
}

// WriteText prints the table and the notes for a terminal.
func (r Report) WriteText(w io.Writer) error {
	m := r.Machine
	return r.table().WriteText(w, fmt.Sprintf("%s; %s; %s; %s; run took %v",
		m.When(), m, r.Server, m.GoVersion, r.Elapsed.Round(time.Second)))
}

// Markdown returns the generated part of docs/performance.md: the run's
// facts, the table and the notes.
func (r Report) Markdown() string {
	m := r.Machine
	facts := []benchkit.Fact{{Name: "date", Value: m.When()}, {Name: "machine", Value: m.String()}, {Name: "server", Value: r.Server}}
	if len(r.MoreServers) > 0 {
		facts = append(facts, benchkit.Fact{Name: "row 7 also on", Value: strings.Join(r.MoreServers, ", ") + " (HERD_REDIS_SERVERS)"})
	}
	facts = append(facts,
		benchkit.Fact{Name: "Go", Value: m.GoVersion},
		benchkit.Fact{Name: "PING p50", Value: benchkit.FormatDuration(r.Ping) + " (the base of every ratio)"})
	intro := fmt.Sprintf("Generated by `make bench` (cmd/herdbench); %v of measuring.", r.Elapsed.Round(time.Second))
	return r.table().Markdown(intro, facts)
}

// Markers are the markers around the generated part of docs/performance.md.
var Markers = benchkit.Markers{
	Begin: "<!-- herdbench:begin (generated by make bench; edit outside the markers) -->",
	End:   "<!-- herdbench:end -->",
}

// WriteMarkdown splices r into the file at path (created when missing),
// between Markers.
func (r Report) WriteMarkdown(path string) error {
	return benchkit.WriteMarkdown(path, r.Markdown(), Markers)
}
