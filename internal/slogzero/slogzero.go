// Package slogzero lets herd's logging, which is written with zerolog, reach
// a *slog.Logger: a user of log/slog sees herd's logs without configuring
// zerolog.
package slogzero

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Logger returns a zerolog.Logger whose events go to l's handler, one record
// per event: the level mapped (trace and debug to Debug, info and events
// without a level to Info, warn to Warn, error, fatal and panic to Error),
// the message field as the record's message, and every other field, in
// order, as an attribute (numbers as int64 when they are integers, else
// float64; objects and arrays as their decoded values). Events at a level
// the handler does not enable cost their encoding only. A nil l gives a
// logger that writes nothing.
func Logger(l *slog.Logger) zerolog.Logger {
	if l == nil {
		return zerolog.Nop()
	}
	return zerolog.New(writer{h: l.Handler()}).Level(zerolog.TraceLevel)
}

// writer hands zerolog's encoded events to a slog.Handler.
type writer struct{ h slog.Handler }

// Write handles an event written without its level.
func (w writer) Write(p []byte) (int, error) { return w.WriteLevel(zerolog.NoLevel, p) }

// WriteLevel handles one encoded event. A logging call has no ctx of its
// own, so the handler gets context.Background().
func (w writer) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	ctx := context.Background()
	lvl := slogLevel(level)
	if !w.h.Enabled(ctx, lvl) {
		return len(p), nil
	}
	msg, attrs, err := decode(p)
	if err != nil {
		// Not one JSON object (zerolog writes nothing else): pass it on whole.
		msg, attrs = strings.TrimSpace(string(p)), nil
	}
	r := slog.NewRecord(time.Now(), lvl, msg, 0)
	r.AddAttrs(attrs...)
	return len(p), w.h.Handle(ctx, r)
}

// slogLevel maps a zerolog level to a slog level.
func slogLevel(l zerolog.Level) slog.Level {
	switch {
	case l == zerolog.NoLevel:
		return slog.LevelInfo
	case l <= zerolog.DebugLevel:
		return slog.LevelDebug
	case l == zerolog.InfoLevel:
		return slog.LevelInfo
	case l == zerolog.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// decode reads one zerolog event: its message and its other fields, in
// order, without the level.
func decode(p []byte) (string, []slog.Attr, error) {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // {
		return "", nil, err
	}
	var msg string
	var attrs []slog.Attr
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", nil, err
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", nil, err
		}
		switch key {
		case zerolog.LevelFieldName:
		case zerolog.MessageFieldName:
			msg, _ = v.(string)
		default:
			attrs = append(attrs, attr(key, v))
		}
	}
	return msg, attrs, nil
}

// attr turns one decoded JSON value into an attribute.
func attr(key string, v any) slog.Attr {
	switch v := v.(type) {
	case string:
		return slog.String(key, v)
	case bool:
		return slog.Bool(key, v)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return slog.Int64(key, i)
		}
		if f, err := v.Float64(); err == nil {
			return slog.Float64(key, f)
		}
		return slog.String(key, v.String())
	}
	return slog.Any(key, v)
}
