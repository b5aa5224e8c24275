package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

const (
	colorNone   = ""
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
	colorRed    = "\x1b[31m"
	colorBold   = "\x1b[1m"
	colorReset  = "\x1b[0m"
)

// timeline prints events with their time since the start of the demo.
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

func (t *timeline) event(who, what, color string) {
	t.print(fmt.Sprintf("%-8s %s", who, what), color)
}

func (t *timeline) note(what string) {
	t.print("==> "+what, colorBold)
}

func (t *timeline) print(line, color string) {
	if t.quiet {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	stamp := fmt.Sprintf("+%8.3fs", time.Since(t.start).Seconds())
	if t.color && color != colorNone {
		line = color + line + colorReset
	}
	fmt.Fprintf(t.out, "%s  %s\n", stamp, line)
}
