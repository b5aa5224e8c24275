package benchkit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Table is the results of a run: a row of cells per measurement, and the
// notes of the rows and of the groups of rows that have one, printed under
// the table.
type Table struct {
	// Header names the columns.
	Header []string
	// Rows are the measurements, in table order.
	Rows []Row
}

// Row is one line of a Table.
type Row struct {
	// Cells are the row's columns, as many as Table.Header.
	Cells []string
	// Label names the row in the notes ("2b").
	Label string
	// Note says how the row was measured, or why it failed (see NoteText);
	// "" for none.
	Note string
	// Group and GroupNote, on the first row of a group of rows measured
	// alike, name the group ("7a-7z") and say once how all of it was
	// measured; the group's note comes before this row's own.
	Group, GroupNote string
}

// notes calls f with the label and text of every note of t, in order.
func (t Table) notes(f func(label, note string)) {
	for _, r := range t.Rows {
		if r.GroupNote != "" {
			f(r.Group, r.GroupNote)
		}
		if r.Note != "" {
			f(r.Label, r.Note)
		}
	}
}

// NoteText is the note of a row that measured with err: note alone when
// err is nil, else the failure first.
func NoteText(err error, note string) string {
	switch {
	case err != nil && note != "":
		return "failed: " + err.Error() + ". " + note
	case err != nil:
		return "failed: " + err.Error()
	}
	return note
}

// WriteText prints the table for a terminal: the columns aligned, then a
// blank line, the footer lines as given, and the notes.
func (t Table) WriteText(w io.Writer, footer ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.Header, "\t"))
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r.Cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, line := range footer {
		fmt.Fprintln(w, line)
	}
	t.notes(func(label, note string) { fmt.Fprintf(w, "  [%s] %s\n", label, note) })
	return nil
}

// Fact is one line of the table of a run's facts above the results in
// markdown: "date", "2026-01-02 03:04 UTC".
type Fact struct{ Name, Value string }

// Markdown returns the generated part of a document: the line intro, the
// facts of the run, the results table and the notes, every cell and note
// escaped.
func (t Table) Markdown(intro string, facts []Fact) string {
	var b strings.Builder
	b.WriteString(intro + "\n\n")
	b.WriteString("| run | |\n|---|---|\n")
	for _, f := range facts {
		fmt.Fprintf(&b, "| %s | %s |\n", f.Name, MarkdownEscape(f.Value))
	}
	b.WriteString("\n| " + strings.Join(t.Header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(t.Header)) + "\n")
	for _, r := range t.Rows {
		cells := make([]string, len(r.Cells))
		for i, c := range r.Cells {
			cells[i] = MarkdownEscape(c)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	b.WriteString("\n")
	t.notes(func(label, note string) { fmt.Fprintf(&b, "- **%s** %s\n", label, MarkdownEscape(note)) })
	return b.String()
}

// MarkdownEscape escapes the pipes of s, for a markdown table cell.
func MarkdownEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Markers delimit the generated part of a document: a program rewrites
// what lies between them and keeps the text around them.
type Markers struct {
	// Begin and End are the marker lines, HTML comments.
	Begin, End string
	// Heading goes above the markers when a document has none yet ("##
	// Against its peers"); "" puts none.
	Heading string
}

// ErrMarkers is returned by Splice when the document has one marker
// without the other, or the end before the begin.
var ErrMarkers = errors.New("benchkit: the markers of the generated part are broken")

// Splice returns doc with the text between m's markers replaced by
// generated. A doc without markers gets them at its end, under m.Heading;
// an empty doc gets a "# Performance" title first.
func Splice(doc, generated string, m Markers) (string, error) {
	block := m.Begin + "\n" + strings.TrimRight(generated, "\n") + "\n" + m.End
	bi, ei := strings.Index(doc, m.Begin), strings.Index(doc, m.End)
	switch {
	case bi < 0 && ei < 0:
		head := strings.TrimRight(doc, "\n")
		if strings.TrimSpace(head) == "" {
			head = "# Performance"
		}
		if m.Heading != "" {
			head += "\n\n" + m.Heading
		}
		return head + "\n\n" + block + "\n", nil
	case bi < 0 || ei < 0 || ei < bi:
		return "", ErrMarkers
	}
	return doc[:bi] + block + doc[ei+len(m.End):], nil
}

// WriteMarkdown splices generated into the file at path (created when
// missing) between m's markers.
func WriteMarkdown(path, generated string, m Markers) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc, err := Splice(string(old), generated, m)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// FormatDuration prints d with three significant digits: "41.2µs",
// "1.25ms", "912ms", "1.03s".
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + "µs"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + "ms"
	}
	return sig3(d.Seconds()) + "s"
}

// FormatBytes prints n bytes as "512 B", or in KiB with three significant
// digits: "1.10 KiB", "12.5 KiB".
func FormatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return sig3(float64(n)/1024) + " KiB"
}

// FormatRatio prints a ratio with three significant digits and a "×".
func FormatRatio(x float64) string { return sig3(x) + "×" }

func sig3(x float64) string {
	switch {
	case x < 10:
		return fmt.Sprintf("%.2f", x)
	case x < 100:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.0f", x)
}
