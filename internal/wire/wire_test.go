package wire

import (
	"strings"
	"testing"
	"time"
)

// TestParseTime covers what the registry's reader and the envelope's reader
// each accepted before they became this one: strings of any precision and
// offset, integer milliseconds (envelopes), fractional milliseconds and the
// range check of the years 0000-9999 (registry entries).
func TestParseTime(t *testing.T) {
	ms := func(n int64) time.Time { return time.UnixMilli(n).UTC() }
	for _, tc := range []struct {
		name, in string
		want     time.Time
		errHas   string // "" when the input is accepted
	}{
		{name: "empty", in: ``},
		{name: "null", in: `null`},
		{name: "empty string", in: `""`},
		{name: "as herd writes it", in: `"2025-11-22T00:06:40.123Z"`, want: ms(1763770000123)},
		{name: "surrounding space", in: " \"2025-11-22T00:06:40.123Z\"\n", want: ms(1763770000123)},
		{name: "nanoseconds and an offset", in: `"2025-11-22T01:06:40.123456789+01:00"`, want: time.Date(2025, 11, 22, 0, 6, 40, 123456789, time.UTC)},
		{name: "seconds only", in: `"2025-11-22T00:06:40Z"`, want: ms(1763770000000)},
		{name: "escaped string", in: `"2025-11-22T00:06:40.123\u005a"`, want: ms(1763770000123)},
		{name: "integer milliseconds (envelopes)", in: `1763770000123`, want: ms(1763770000123)},
		{name: "fractional milliseconds (registry)", in: `1763770000123.9`, want: ms(1763770000123)},
		{name: "exponent milliseconds", in: `1.763770000123e12`, want: ms(1763770000123)},
		{name: "negative milliseconds", in: `-1000`, want: ms(-1000)},
		{name: "first millisecond of year 0000", in: `-62167219200000`, want: ms(-62167219200000)},
		{name: "last millisecond of year 9999", in: `253402300799999`, want: ms(253402300799999)},
		{name: "milliseconds past year 9999", in: `253402300800000`, errHas: "outside the years"},
		{name: "milliseconds before year 0000", in: `-62167219200001`, errHas: "outside the years"},
		{name: "huge milliseconds", in: `1e300`, errHas: "outside the years"},
		{name: "year 10000 by its offset", in: `"9999-12-31T23:59:59-01:00"`, errHas: "outside the years"},
		{name: "not RFC 3339", in: `"yesterday"`, errHas: "RFC 3339"},
		{name: "an object", in: `{}`, errHas: "neither"},
		{name: "a boolean", in: `true`, errHas: "neither"},
		{name: "unterminated string", in: `"2025`, errHas: "timestamp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTime([]byte(tc.in))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("ParseTime(%s) = %v, %v; want an error with %q", tc.in, got, err, tc.errHas)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Fatalf("ParseTime(%s) = %v, %v; want %v in UTC", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestTimeLayoutRoundTrip: every time ParseTime accepts is written back by
// TimeLayout in its fixed length and read again to the same millisecond.
func TestTimeLayoutRoundTrip(t *testing.T) {
	for _, in := range []string{`-62167219200000`, `253402300799999`, `0`, `1763770000123`} {
		v, err := ParseTime([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		s := v.Format(TimeLayout)
		back, err := ParseTime([]byte(`"` + s + `"`))
		if len(s) != len(TimeLayout) || err != nil || !back.Equal(v) {
			t.Fatalf("%s: written %q, read back %v, %v", in, s, back, err)
		}
	}
}

func TestTruncate(t *testing.T) {
	short := strings.Repeat("a", 64)
	if Truncate(short) != short {
		t.Errorf("a 64-byte string was shortened")
	}
	if got := Truncate(short + "b"); got != short+"…" {
		t.Errorf("Truncate of 65 bytes = %q", got)
	}
}
