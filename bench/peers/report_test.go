package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSplice(t *testing.T) {
	doc := "# Performance\n\ntext\n"
	first, err := splice(doc, "table one\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, doc[:len(doc)-1]) || !strings.Contains(first, "## Against its peers\n\n"+beginMarker+"\ntable one\n"+endMarker) {
		t.Fatalf("first splice:\n%s", first)
	}
	second, err := splice(first+"\nafter\n", "table two")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(second, "table one") || !strings.Contains(second, "table two") || !strings.HasSuffix(second, "\nafter\n") || strings.Count(second, "## Against its peers") != 1 {
		t.Fatalf("second splice:\n%s", second)
	}
	if _, err := splice("x "+endMarker+" "+beginMarker, "t"); !errors.Is(err, errMarkers) {
		t.Fatalf("markers out of order: err = %v, want errMarkers", err)
	}
	if _, err := splice("x "+beginMarker, "t"); !errors.Is(err, errMarkers) {
		t.Fatalf("end marker missing: err = %v, want errMarkers", err)
	}
}

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	got := summarize(s)
	if got.n != 100 || got.p50 != 50*time.Millisecond || got.p99 != 99*time.Millisecond {
		t.Fatalf("summarize(1..100 ms) = %+v, want n 100, p50 50ms, p99 99ms", got)
	}
	if got := summarize(s[95:]); got.p99 != 5*time.Millisecond || got.p50 != 3*time.Millisecond {
		t.Fatalf("summarize(5..1 ms) = %+v, want p50 3ms, p99 5ms (the maximum)", got)
	}
	if got := summarize(nil); got.n != 0 {
		t.Fatalf("summarize(nil) = %+v, want the zero summary", got)
	}
}

func TestMet(t *testing.T) {
	herd := &row{s: summary{n: 10, p50: 4 * time.Millisecond, p99: 8 * time.Millisecond}}
	for _, tc := range []struct {
		name     string
		peer     summary
		g50, g99 float64
		want     string
	}{
		{"ahead on both", summary{n: 10, p50: 10 * time.Millisecond, p99: 11 * time.Millisecond}, 0.5, 0.8, "yes"},
		{"p50 only", summary{n: 10, p50: 10 * time.Millisecond, p99: 9 * time.Millisecond}, 0.5, 0.8, "p50 only"},
		{"p99 only", summary{n: 10, p50: 6 * time.Millisecond, p99: 20 * time.Millisecond}, 0.5, 0.8, "p99 only"},
		{"behind", summary{n: 10, p50: 2 * time.Millisecond, p99: 4 * time.Millisecond}, 1, 1, "no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := row{s: tc.peer, herd: herd, goal50: tc.g50, goal99: tc.g99}
			if got := (report{}).met(x); got != tc.want {
				t.Fatalf("met = %q, want %q", got, tc.want)
			}
		})
	}
}
