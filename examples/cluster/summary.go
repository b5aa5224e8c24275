package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// print writes the summary table: each measurement beside the bound the
// configuration gives it.
func (s summary) print(out io.Writer) {
	c := s.Config
	terms := make([]string, len(s.Terms))
	for i, t := range s.Terms {
		terms[i] = strconv.FormatInt(t, 10)
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(cols ...string) { fmt.Fprintln(w, strings.Join(cols, "\t")) }
	row("SUMMARY", "MEASURED", "BOUND / EXPECTED")
	row("first election", round(s.FirstElection).String(), "")
	row("slave killed -> slave-removed", round(s.SlaveRemoved).String(),
		fmt.Sprintf("SlaveTimeout + CheckInterval = %v", c.SlaveTimeout+c.CheckInterval))
	row("master crashed -> it fenced itself", round(s.SelfFenced).String(),
		fmt.Sprintf("LockTTL - StepDownMargin = %v after its last renewal", c.LockTTL-c.StepDownMargin))
	row("master crashed -> new master", round(s.Failover).String(),
		fmt.Sprintf("LockTTL + ElectionJitter = %v after its last renewal", c.LockTTL+c.ElectionJitter))
	row("graceful handover", round(s.Handover).String(), "about one round trip after the release")
	for i, t := range terms {
		label := ""
		if i == 0 {
			label = "terms (election, failover, handover)"
		}
		row(label, t, map[bool]string{true: "", false: "greater than the one before"}[i == 0])
	}
	for _, m := range s.Moves {
		row("cameras moved: "+m.Step, strconv.Itoa(m.Moved), fmt.Sprintf("%d, the share of the node that left or joined", m.Share))
	}
	row("assignment messages routed", strconv.Itoa(s.Routed), "")
	row("stale sends refused by the old master", strconv.Itoa(s.RefusedLocal), "1 (ErrNotMaster: it had fenced itself)")
	row("stale sends refused by Redis", strconv.Itoa(s.RefusedRedis), "1 (ErrNotMaster from the route script)")
	if s.RefusedLate > 0 {
		row("assignments refused, mastership over", strconv.Itoa(s.RefusedLate), "0 unless a master lost its lock while routing")
	}
	row("stale messages rejected by term", strconv.Itoa(s.Rejected), "1 (the in-flight message)")
	row("error events", strconv.Itoa(s.Errors), fmt.Sprintf("0 (and %d on the killed and crashed nodes, whose client is closed)", s.Expected))
	_ = w.Flush()
}
