// Package testsync holds what herd's tests of concurrent programs share: a
// Buffer that a program (or its logger) writes while the test reads it, and
// WaitFor, which polls a condition the program will make true. Only tests
// import it.
package testsync

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for concurrent writers and readers: give it
// to a program as its output and read it with String while it runs.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// LogLines decodes the lines written so far as JSON objects, as zerolog
// writes them, and returns those whose "message" contains msg. A line that
// is not a JSON object fails the test.
func (s *Buffer) LogLines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(s.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if text, _ := m["message"].(string); strings.Contains(text, msg) {
			out = append(out, m)
		}
	}
	return out
}

// DefaultWait is how long WaitFor waits: long enough for a loaded machine,
// since a test that waits fails only when the program never gets there.
const DefaultWait = 10 * time.Second

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test (naming what it waited for) if it does not within DefaultWait.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitWithin(t, DefaultWait, what, cond)
}

// WaitWithin is WaitFor with a limit of its own: cond is polled every
// limit/1000 (at least every millisecond, at most every 50 ms).
func WaitWithin(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	every := min(max(limit/1000, time.Millisecond), 50*time.Millisecond)
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, limit)
			return
		}
		time.Sleep(every)
	}
}
