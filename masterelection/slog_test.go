package masterelection

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// lines is a slog.Handler that keeps "LEVEL message key=value …" lines.
type lines struct {
	mu  *sync.Mutex
	out *[]string
}

func (h lines) Enabled(context.Context, slog.Level) bool { return true }
func (h lines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h lines) WithGroup(string) slog.Handler            { return h }
func (h lines) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	h.mu.Lock()
	*h.out = append(*h.out, s)
	h.mu.Unlock()
	return nil
}

// With Config.Slog the election's logs reach a *slog.Logger, with their
// fields, and nothing needs zerolog.
func TestSlogReceivesTheLogs(t *testing.T) {
	h := lines{mu: &sync.Mutex{}, out: new([]string)}
	w := newWorld(t)
	cfg := testConfig("a")
	cfg.Slog = slog.New(h)
	a := w.node(cfg)
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	want := "INFO became master lock=test node=a term=" + strconv.FormatInt(a.Term(), 10)
	waitFor(t, "the became-master line", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Contains(*h.out, want)
	})
}
