// Package wire holds the small pieces that herd's JSON formats share: the
// timestamp layout of JavaScript's Date.prototype.toISOString, the one
// lenient reader of timestamps (ParseTime), and the excerpt of a foreign
// value quoted in an error (Truncate). The registry entries and the pub/sub
// envelopes use them, so both read and write timestamps alike.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	s := string(raw)
	if s == "" || s == "null" || s == `""` {
		return time.Time{}, nil
	}
	if s[0] != '"' {
		var ms float64
		if err := json.Unmarshal(raw, &ms); err != nil {
			return time.Time{}, fmt.Errorf("timestamp %q is neither an RFC 3339 string nor milliseconds since the epoch", Truncate(s))
		}
		if ms < minMillis || ms > maxMillis {
			return time.Time{}, fmt.Errorf("timestamp %s ms is outside the years 0000-9999", Truncate(s))
		}
		return time.UnixMilli(int64(ms)).UTC(), nil
	}
	var str string
	if len(s) >= 2 && s[len(s)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		str = s[1 : len(s)-1] // nothing escaped: what herd writes
	} else if err := json.Unmarshal(raw, &str); err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q: %w", Truncate(s), err)
	}
	t, err := time.Parse(time.RFC3339Nano, str)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q is not RFC 3339", Truncate(str))
	}
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}, fmt.Errorf("timestamp %q is outside the years 0000-9999 in UTC", Truncate(str))
	}
	return t, nil
}

// Truncate shortens s to its first 64 bytes (and an ellipsis), to quote a
// value that came from elsewhere in an error message.
func Truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
