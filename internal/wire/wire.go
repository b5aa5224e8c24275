// Package wire holds the small pieces that herd's JSON formats share: the
// timestamp layout of JavaScript's Date.prototype.toISOString, the one
// lenient reader of timestamps (ParseTime), and the excerpt of a foreign
// value quoted in an error (Truncate). The registry entries and the pub/sub
// envelopes use them, so both read and write timestamps alike.
package wire

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// TimeLayout is how herd writes a timestamp: UTC with milliseconds, as
// Date.prototype.toISOString writes it ("2025-11-22T00:06:40.123Z"). Every
// time in the years 0000 to 9999 has this length.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// The timestamps ParseTime reads, in milliseconds since the epoch: the years
// 0000 to 9999, which TimeLayout writes back in its fixed length.
const (
	minMillis = -62167219200000 // 0000-01-01T00:00:00.000Z
	maxMillis = 253402300799999 // 9999-12-31T23:59:59.999Z
)

// ParseTime reads a timestamp from raw, a JSON value, leniently: an RFC 3339
// string of any precision and offset, or a number of milliseconds since the
// epoch (an integer or a fraction, which is cut to whole milliseconds); an
// empty raw, null or "" is the zero time. The result is in UTC and lies in
// the years 0000 to 9999, so that TimeLayout writes it back: anything else
// is an error, which does not name the member (the caller does).
func ParseTime(raw []byte) (time.Time, error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "", "null", `""`:
		return time.Time{}, nil
	}
	if raw[0] != '"' {
		return parseMillis(raw)
	}
	str, err := unquote(raw)
	if err != nil {
		return time.Time{}, err
	}
	return parseRFC3339(str)
}

// parseMillis reads raw, a JSON number, as milliseconds since the epoch,
// cut to whole milliseconds, in the years 0000 to 9999.
func parseMillis(raw []byte) (time.Time, error) {
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q is neither an RFC 3339 string nor milliseconds since the epoch", Truncate(string(raw)))
	}
	if !within(ms, minMillis, maxMillis) {
		return time.Time{}, fmt.Errorf("timestamp %s ms is outside the years 0000-9999", Truncate(string(raw)))
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

// unquote returns the JSON string raw (which starts with a quote) without
// its quotes. A string with nothing escaped, which is what herd writes, is
// cut out of raw; any other goes through encoding/json.
func unquote(raw []byte) (string, error) {
	s := string(raw)
	if str, ok := strings.CutSuffix(s[1:], `"`); ok && !strings.Contains(str, `\`) {
		return str, nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return "", fmt.Errorf("timestamp %q: %w", Truncate(s), err)
	}
	return str, nil
}

// parseRFC3339 reads str as an RFC 3339 time of any precision and offset,
// converted to UTC, in the years 0000 to 9999.
func parseRFC3339(str string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, str)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q is not RFC 3339", Truncate(str))
	}
	t = t.UTC()
	if !within(t.Year(), 0, 9999) {
		return time.Time{}, fmt.Errorf("timestamp %q is outside the years 0000-9999 in UTC", Truncate(str))
	}
	return t, nil
}

// within reports whether lo <= v <= hi: the range checks of ParseTime,
// on milliseconds and on years.
func within[T cmp.Ordered](v, lo, hi T) bool {
	return lo <= v && v <= hi
}

// Truncate shortens s to its first 64 bytes (and an ellipsis), to quote a
// value that came from elsewhere in an error message.
func Truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
