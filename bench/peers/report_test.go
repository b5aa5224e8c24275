package main

import (
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/benchkit"
)

func TestMet(t *testing.T) {
	herd := &row{s: benchkit.Summary{N: 10, P50: 4 * time.Millisecond, P99: 8 * time.Millisecond}}
	for _, tc := range []struct {
		name     string
		peer     benchkit.Summary
		g50, g99 float64
		want     string
	}{
		{"ahead on both", benchkit.Summary{N: 10, P50: 10 * time.Millisecond, P99: 11 * time.Millisecond}, 0.5, 0.8, "yes"},
		{"p50 only", benchkit.Summary{N: 10, P50: 10 * time.Millisecond, P99: 9 * time.Millisecond}, 0.5, 0.8, "p50 only"},
		{"p99 only", benchkit.Summary{N: 10, P50: 6 * time.Millisecond, P99: 20 * time.Millisecond}, 0.5, 0.8, "p99 only"},
		{"behind", benchkit.Summary{N: 10, P50: 2 * time.Millisecond, P99: 4 * time.Millisecond}, 1, 1, "no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := row{s: tc.peer, herd: herd, goal50: tc.g50, goal99: tc.g99}
			if got := (report{}).met(x); got != tc.want {
				t.Fatalf("met = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMarkdown(t *testing.T) {
	herd := row{id: "1a", what: "election", peer: "herd", store: "redis", s: benchkit.Summary{N: 3, P50: 2 * time.Millisecond, P99: 4 * time.Millisecond}, note: "a | b"}
	r := report{
		machine: benchkit.Machine{CPUs: 2, CPUModel: "Some CPU", OS: "linux", Arch: "amd64", GoVersion: "go1.26", Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)},
		rt:      map[string]benchkit.Summary{"redis": {N: 10, P50: time.Millisecond, P99: 2 * time.Millisecond}},
		rtWhat:  map[string]string{"redis": "PING"},
		rows:    []row{herd, {id: "1b", what: "election", peer: "etcd", store: "redis", s: benchkit.Summary{N: 3, P50: 4 * time.Millisecond, P99: 8 * time.Millisecond}, herd: &herd, goal50: 1, goal99: 1}},
	}
	md := r.markdown()
	for _, want := range []string{
		"| date | 2026-01-02 03:04 UTC |",
		"| machine | 2 CPUs (nproc), Some CPU, linux/amd64 |",
		"| redis round trip | p50 1.00ms, p99 2.00ms (PING, n 10) |",
		"| 1b | election | etcd | 3 | 4.00ms | 8.00ms | 4.00× / 4.00× | 0.50× / 0.50× | ≤ 1.00× / ≤ 1.00× | yes |",
		`- **1a, herd** a \| b`,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
