package faults

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// chatty are the kinds left out of a condensed timeline: one record per
// message or per lock call.
var chatty = map[Kind]bool{KindAccepted: true, KindSent: true, KindPublish: true, KindLockCall: true, KindRegPoll: true}

// WriteTimeline writes records in time order, one line each, with times in
// milliseconds since the first record. With full unset, the per-message and
// per-lock-call records are left out (rejections and errors stay).
func WriteTimeline(w io.Writer, records []Record, full bool) {
	recs := slices.Clone(records)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].T < recs[j].T })
	if len(recs) == 0 {
		fmt.Fprintln(w, "(no records)")
		return
	}
	origin := recs[0].T
	ms := func(t int64) string { return fmt.Sprintf("%.3f", float64(t-origin)/1e6) }
	for _, r := range recs {
		if !full && chatty[r.Kind] {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%12s  %-8s %-12s", ms(r.T), r.Proc, r.Kind)
		if r.Term != 0 {
			fmt.Fprintf(&b, " term=%d", r.Term)
		}
		if r.Seq != 0 {
			fmt.Fprintf(&b, " seq=%d", r.Seq)
		}
		if r.Peer != "" {
			fmt.Fprintf(&b, " peer=%s", r.Peer)
		}
		if r.Highest != 0 {
			fmt.Fprintf(&b, " highest=%d", r.Highest)
		}
		if r.Begin != 0 {
			fmt.Fprintf(&b, " begin=%s", ms(r.Begin))
		}
		if r.Seen != 0 {
			fmt.Fprintf(&b, " seen=%s", ms(r.Seen))
		}
		if r.Role != "" {
			fmt.Fprintf(&b, " role=%s", r.Role)
		}
		if r.Variant != "" {
			fmt.Fprintf(&b, " variant=%s", r.Variant)
		}
		if r.Deliveries > 1 {
			fmt.Fprintf(&b, " deliveries=%d", r.Deliveries)
		}
		if r.Pid != 0 {
			fmt.Fprintf(&b, " pid=%d", r.Pid)
		}
		if r.Detail != "" {
			fmt.Fprintf(&b, " %s", r.Detail)
		}
		fmt.Fprintln(w, b.String())
	}
}
