package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/herdkit/herd/cmd/herd/internal/operate"
)

// Width is the terminal width tables fit in.
const Width = 80

// column is one column of a table: its header, the narrowest it may be
// squeezed to, the order in which it gives way (1 first; 0 never: every
// column of ids, which users copy), and its cells.
type column struct {
	header string
	min    int
	give   int
	cells  []string
}

// writeTable writes the columns aligned, two spaces apart, squeezing the
// columns that can give (in their order, each down to its min) until each
// line fits in width; a cell cut short ends with "…". Columns that never
// give are written in full, the line longer than width when they need it. Control characters
// in a cell are written escaped (escape), so that no value from Redis can
// break a row or drive the terminal.
func writeTable(w io.Writer, cols []column, width int) {
	cols = slices.Clone(cols)
	for i := range cols {
		cols[i].header = escape(cols[i].header)
		cells := make([]string, len(cols[i].cells))
		for r, s := range cols[i].cells {
			cells[r] = escape(s)
		}
		cols[i].cells = cells
	}
	widths := make([]int, len(cols))
	total := 2 * (len(cols) - 1)
	for i, c := range cols {
		widths[i] = utf8.RuneCountInString(c.header)
		for _, s := range c.cells {
			widths[i] = max(widths[i], utf8.RuneCountInString(s))
		}
		total += widths[i]
	}
	for total > width {
		next := -1
		for i, c := range cols {
			if c.give > 0 && widths[i] > c.min && (next < 0 || c.give < cols[next].give) {
				next = i
			}
		}
		if next < 0 {
			break // every column at its min: let the line be long
		}
		widths[next]--
		total--
	}
	rows := 0
	if len(cols) > 0 {
		rows = len(cols[0].cells)
	}
	line := func(cell func(i int) string) {
		var b strings.Builder
		for i := range cols {
			s := fit(cell(i), widths[i])
			b.WriteString(s)
			if i < len(cols)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(s)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(func(i int) string { return cols[i].header })
	for r := range rows {
		line(func(i int) string { return cols[i].cells[r] })
	}
}

// escape returns s with every control character (C0, DEL, C1, the line and
// paragraph separators U+2028 and U+2029) and every byte that is not UTF-8
// written as a Go escape: \n, \r, \t, \xNN or \uNNNN. Other text is
// left as it is.
func escape(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// fit cuts s to n runes, ending with "…" when cut.
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 1 {
		return string([]rune(s)[:n])
	}
	return string([]rune(s)[:n-1]) + "…"
}

// processTable writes ps as a table: process id, role, identifier,
// heartbeat age, the three capabilities (handles detections, maximum of
// subscriptions, preferred workload) and metadata, with the priority after
// the role when any process has one (Config.Priority, 0 by default). The
// process id is never cut.
func processTable(w io.Writer, ps []operate.Process) {
	prio := slices.ContainsFunc(ps, func(p operate.Process) bool { return p.Info.Priority != 0 })
	cols := []column{{header: "PROCESS"}, {header: "ROLE"}}
	if prio {
		cols = append(cols, column{header: "PRIO"})
	}
	cols = append(cols, column{header: "IDENTIFIER", min: 10, give: 2},
		column{header: "AGE"}, column{header: "DET"}, column{header: "SUBS"}, column{header: "LOAD"}, column{header: "METADATA", min: 8, give: 1})
	for _, p := range ps {
		c := p.Info.Capabilities
		det := "-"
		if c.CanProcessDetections {
			det = "yes"
		}
		cells := []string{p.Info.ProcessID, string(p.Info.Role)}
		if prio {
			cells = append(cells, fmt.Sprint(p.Info.Priority))
		}
		cells = append(cells, dash(p.Info.Identifier), operate.FormatAge(p.Age),
			det, fmt.Sprint(c.MaxSubscriptions), fmt.Sprintf("%d%%", c.PreferredWorkload), dash(metadata(p.Info.Metadata)))
		for i := range cols {
			cols[i].cells = append(cols[i].cells, cells[i])
		}
	}
	writeTable(w, cols, Width)
}

// metadata writes m as key=value pairs sorted by key, values as JSON
// unless they are strings.
func metadata(m map[string]any) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		s, ok := v.(string)
		if !ok {
			s = compactJSON(v)
		}
		parts = append(parts, k+"="+s)
	}
	return strings.Join(parts, " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// deadTable writes dead letters as a table: id, age, the process whose
// inbox it was in, type, message id, deliveries and the last error. The
// ids (the dead letter's, the inbox's process id, the message id) are never
// cut: the type gives way first, then the error; "?" stands for the type
// and message id of an envelope that cannot be decoded.
func deadTable(w io.Writer, ls []operate.DeadLetter) {
	cols := []column{
		{header: "ID"}, {header: "AGE"}, {header: "INBOX"}, {header: "TYPE", min: 8, give: 1},
		{header: "MESSAGE"}, {header: "DELIV"}, {header: "ERROR", min: 16, give: 2},
	}
	for _, l := range ls {
		typ, msg := l.Message.Type, l.Message.ID
		if msg == "" {
			typ, msg = "?", "?"
		}
		cells := []string{l.ID, operate.FormatAge(l.Age), dash(l.Inbox), dash(typ), msg, fmt.Sprint(l.Deliveries), dash(oneLine(l.Error))}
		for i := range cols {
			cols[i].cells = append(cols[i].cells, cells[i])
		}
	}
	writeTable(w, cols, Width)
}

// oneLine joins the lines of s with spaces, so that a cell stays on its row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// assignTable writes one row per item, then one per slave and the counts;
// items and slave ids are never cut.
func assignTable(w io.Writer, as operate.Assignments) {
	cols := []column{{header: "ITEM"}, {header: "PLANNED"}, {header: "OWNER"},
		{header: "LEFT"}, {header: "STATE"}}
	for _, it := range as.Items {
		left := "-"
		if it.Owner != "" {
			left = operate.FormatAge(it.Left)
		}
		cells := []string{it.Item, dash(it.Planned), dash(it.Owner), left, it.State}
		for i := range cols {
			cols[i].cells = append(cols[i].cells, cells[i])
		}
	}
	writeTable(w, cols, Width)
	fmt.Fprintln(w)
	slaves := []column{{header: "SLAVE"}, {header: "PLANNED"}, {header: "OWNED"}}
	for _, s := range as.Slaves {
		cells := []string{s.ID, fmt.Sprint(s.Planned), fmt.Sprint(s.Owned)}
		for i := range slaves {
			slaves[i].cells = append(slaves[i].cells, cells[i])
		}
	}
	writeTable(w, slaves, Width)
	fmt.Fprintf(w, "%d items: %d owned, %d moving, %d waiting, %d unassigned, %d removed\n", len(as.Items),
		as.Counts[operate.ItemOwned], as.Counts[operate.ItemMoving], as.Counts[operate.ItemWaiting],
		as.Counts[operate.ItemUnassigned], as.Counts[operate.ItemRemoved])
}
