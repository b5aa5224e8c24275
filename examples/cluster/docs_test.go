package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/masterelection"
)

// TestTuningTableHolds keeps docs/tuning.md true: every set of its table
// passes Validate, follows the ratios it states, and shows the bounds the
// text derives; the "Normal" row is DefaultConfig; the Validate example
// prints what the page shows; and the demo follows the same ratios.
func TestTuningTableHolds(t *testing.T) {
	raw, err := os.ReadFile("../../docs/tuning.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	rows := 0
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 11 || cells[0] == "scenario" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows++
		d := make([]time.Duration, len(cells)-1)
		for i, c := range cells[1:] {
			if d[i], err = time.ParseDuration(c); err != nil {
				t.Fatalf("row %q, column %d: %v", cells[0], i+2, err)
			}
		}
		cfg := masterelection.DefaultConfig()
		cfg.LockTTL, cfg.HeartbeatInterval, cfg.CheckInterval, cfg.ElectionJitter = d[0], d[1], d[2], d[3]
		cfg.StepDownMargin, cfg.SlaveTimeout, cfg.ProcessTTL = d[4], d[5], d[6]
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", cells[0], err)
		}
		ttl := cfg.LockTTL
		for _, r := range []struct {
			what      string
			got, want time.Duration
		}{
			{"HeartbeatInterval", cfg.HeartbeatInterval, ttl / 3},
			{"CheckInterval", cfg.CheckInterval, ttl / 3},
			{"ElectionJitter", cfg.ElectionJitter, ttl / 15},
			{"StepDownMargin", cfg.StepDownMargin, ttl / 10},
			{"SlaveTimeout", cfg.SlaveTimeout, ttl / 2},
			{"ProcessTTL", cfg.ProcessTTL, ttl * 3 / 2},
			{"crash failover", d[7], ttl + cfg.ElectionJitter},
			{"self-fencing", d[8], ttl - cfg.StepDownMargin},
			{"dead slave removed", d[9], cfg.SlaveTimeout + min(cfg.CheckInterval, cfg.SlaveTimeout/3)},
		} {
			if r.got != r.want {
				t.Errorf("%s: %s is %v, the stated rule gives %v", cells[0], r.what, r.got, r.want)
			}
		}
		if strings.HasPrefix(cells[0], "Normal") {
			def := masterelection.DefaultConfig()
			def.StepDownMargin = def.LockTTL / 10 // 0 means this
			if cfg.LockTTL != def.LockTTL || cfg.HeartbeatInterval != def.HeartbeatInterval || cfg.CheckInterval != def.CheckInterval ||
				cfg.ElectionJitter != def.ElectionJitter || cfg.StepDownMargin != def.StepDownMargin ||
				cfg.SlaveTimeout != def.SlaveTimeout || cfg.ProcessTTL != def.ProcessTTL {
				t.Errorf("the Normal row is not DefaultConfig: %+v", def)
			}
		}
	}
	if rows != 3 {
		t.Fatalf("found %d sets in the table, want 3", rows)
	}
	checkLargeHerd(t, doc)

	bad := masterelection.DefaultConfig()
	bad.NodeID = "worker 1"
	bad.HeartbeatInterval = 11 * time.Second
	if !strings.Contains(doc, "```\n"+bad.Validate().Error()+"\n```") {
		t.Errorf("the page does not show Validate's output:\n%v", bad.Validate())
	}

	demo := defaultOptions().config("x", 1)
	ttl := demo.LockTTL
	ms := time.Millisecond
	if demo.HeartbeatInterval != (ttl/3).Truncate(ms) || demo.CheckInterval != (ttl/3).Truncate(ms) ||
		demo.ElectionJitter != (ttl/15).Truncate(ms) || demo.StepDownMargin != ttl/10 ||
		demo.SlaveTimeout != ttl/2 || demo.ProcessTTL != ttl*3/2 {
		t.Errorf("the demo does not follow the ratios of docs/tuning.md: %+v", demo)
	}
}

// checkLargeHerd keeps docs/tuning.md's large-herd set true: it passes
// Validate, follows the ratios the page states (CheckInterval 2/3 LockTTL,
// SlaveTimeout LockTTL, ProcessTTL 2 × LockTTL, the rest the defaults), and
// shows the bounds that follow: a dead slave removed within SlaveTimeout + a
// sweep, a restart after a crash waiting up to SlaveTimeout.
func checkLargeHerd(t *testing.T, doc string) {
	t.Helper()
	found := false
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 8 || cells[0] != "Large herd" {
			continue
		}
		found = true
		d := make([]time.Duration, len(cells)-1)
		var err error
		for i, c := range cells[1:] {
			if d[i], err = time.ParseDuration(c); err != nil {
				t.Fatalf("large herd, column %d: %v", i+2, err)
			}
		}
		ttl := d[0]
		cfg := masterelection.Config{LockTTL: ttl, CheckInterval: ttl * 2 / 3, SlaveTimeout: ttl, ProcessTTL: 2 * ttl}
		if err := cfg.Validate(); err != nil {
			t.Errorf("large herd: %v", err)
		}
		for _, r := range []struct {
			what      string
			got, want time.Duration
		}{
			{"HeartbeatInterval", d[1], ttl / 3},
			{"CheckInterval", d[2], cfg.CheckInterval},
			{"SlaveTimeout", d[3], cfg.SlaveTimeout},
			{"ProcessTTL", d[4], cfg.ProcessTTL},
			{"dead slave removed", d[5], cfg.SlaveTimeout + min(cfg.CheckInterval, cfg.SlaveTimeout/3)},
			{"restart after a crash", d[6], cfg.SlaveTimeout},
		} {
			if r.got != r.want {
				t.Errorf("large herd: %s is %v, the stated rule gives %v", r.what, r.got, r.want)
			}
		}
	}
	if !found {
		t.Fatal("docs/tuning.md has no large-herd row")
	}
}
