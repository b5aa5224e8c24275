package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestDemoRunsOnEmbeddedRedis(t *testing.T) {
	var out bytes.Buffer
	o := defaultOptions()
	o.LockTTL = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := demo(ctx, o, "", &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"MASTER (term", "crashing node-", "failover took", "handover to node-", "summary"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

func TestDemoRejectsTooFewNodes(t *testing.T) {
	o := defaultOptions()
	o.Nodes = 2
	var out bytes.Buffer
	if err := demo(context.Background(), o, "", &out); err == nil || !strings.Contains(err.Error(), "at least 3") {
		t.Fatalf("demo with 2 nodes: %v", err)
	}
}
