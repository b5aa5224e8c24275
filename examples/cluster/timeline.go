package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// kind selects how a timeline line is shown.
type kind int

const (
	kindInfo    kind = iota // plain
	kindStep                // a step of the scenario (bold)
	kindMaster              // became master (green)
	kindLost                // lost mastership, a slave left (yellow)
	kindMessage             // a routed message arrived (cyan)
	kindReject              // a stale message refused or rejected (magenta)
	kindError               // an unexpected error (red)
	kindMeasure             // a measured time (bold green)
)

var colors = map[kind]string{
	kindStep:    "\x1b[1m",
	kindMaster:  "\x1b[32m",
	kindLost:    "\x1b[33m",
	kindMessage: "\x1b[36m",
	kindReject:  "\x1b[35m",
	kindError:   "\x1b[31m",
	kindMeasure: "\x1b[1;32m",
}

const colorReset = "\x1b[0m"

// timeline prints events, one per line, with the time since the start of
// the demo. It is safe for concurrent use; lines never interleave.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
	quiet bool
	color bool
}

func newTimeline(out io.Writer, quiet, color bool) *timeline {
	return &timeline{out: out, start: time.Now(), quiet: quiet, color: color}
}

// event prints what happened on the node who.
func (t *timeline) event(who, what string, k kind) {
	t.print(fmt.Sprintf("%-8s %s", who, what), k)
}

// step announces a step of the scenario.
func (t *timeline) step(what string) { t.print("==> "+what, kindStep) }

// note explains what comes next.
func (t *timeline) note(what string) { t.print("    "+what, kindInfo) }

// measure prints a measured result.
func (t *timeline) measure(what string) { t.print("    "+what, kindMeasure) }

// mute silences the timeline from now on (the teardown is not part of the
// story).
func (t *timeline) mute() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.quiet = true
}

func (t *timeline) print(line string, k kind) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.quiet {
		return
	}
	stamp := fmt.Sprintf("+%7.3fs", time.Since(t.start).Seconds())
	if c := colors[k]; t.color && c != "" {
		line = c + line + colorReset
	}
	fmt.Fprintf(t.out, "%s  %s\n", stamp, line)
}

// printf writes text outside the timeline (headers, the summary); quiet
// does not silence it.
func (t *timeline) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format, args...)
}
