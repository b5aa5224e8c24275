package slogzero

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// capture is a slog.Handler that keeps its records as text.
type capture struct {
	min slog.Level
	mu  *sync.Mutex
	out *[]string
}

func newCapture(min slog.Level) capture {
	return capture{min: min, mu: &sync.Mutex{}, out: new([]string)}
}

func (c capture) Enabled(_ context.Context, l slog.Level) bool { return l >= c.min }
func (c capture) WithAttrs([]slog.Attr) slog.Handler           { return c }
func (c capture) WithGroup(string) slog.Handler                { return c }
func (c capture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.Kind().String() + ":" + a.Value.String())
		return true
	})
	c.mu.Lock()
	*c.out = append(*c.out, b.String())
	c.mu.Unlock()
	return nil
}

func (c capture) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*c.out)
}

func TestEventsBecomeRecords(t *testing.T) {
	c := newCapture(slog.LevelDebug)
	log := Logger(slog.New(c)).With().Str("lock", "billing").Logger()
	log.Info().Int64("term", 1763770000123).Str("reason", "stopped").Msg("no longer master")
	log.Warn().Err(errors.New("boom")).Float64("ratio", 1.5).Bool("ok", false).Msg("election error")
	log.Debug().Interface("panic", map[string]any{"a": 1}).Msg("")
	log.Trace().Msg("fine")
	log.Error().Msg("bad")
	log.Log().Msg("no level")
	want := []string{
		"INFO no longer master lock=String:billing term=Int64:1763770000123 reason=String:stopped",
		"WARN election error lock=String:billing error=String:boom ratio=Float64:1.5 ok=Bool:false",
		"DEBUG  lock=String:billing panic=Any:map[a:1]",
		"DEBUG fine lock=String:billing",
		"ERROR bad lock=String:billing",
		"INFO no level lock=String:billing",
	}
	if got := c.lines(); !slices.Equal(got, want) {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDisabledLevelsAreDropped(t *testing.T) {
	c := newCapture(slog.LevelWarn)
	log := Logger(slog.New(c))
	log.Info().Msg("quiet")
	log.Debug().Msg("quieter")
	log.Error().Msg("loud")
	if got := c.lines(); !slices.Equal(got, []string{"ERROR loud"}) {
		t.Fatalf("records %q", got)
	}
}

func TestNotJSONIsPassedOnWhole(t *testing.T) {
	c := newCapture(slog.LevelDebug)
	w := writer{h: c}
	if n, err := w.WriteLevel(zerolog.InfoLevel, []byte("plain text\n")); n != 11 || err != nil {
		t.Fatalf("WriteLevel: %d, %v", n, err)
	}
	if got := c.lines(); !slices.Equal(got, []string{"INFO plain text"}) {
		t.Fatalf("records %q", got)
	}
}

func TestNilLoggerWritesNothing(t *testing.T) {
	log := Logger(nil)
	log.Error().Msg("nowhere") // must not panic
}
