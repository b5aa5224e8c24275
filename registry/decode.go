package registry

import (
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/herdkit/herd/internal/wire"
)

// herdsForm reads exactly what ProcessInfo.MarshalJSON writes and the
// registry scripts store, without reflection: the members in MarshalJSON's
// order, each named byte for byte, no white space, the optional ones
// (identifier, registeredAt, metadata, nonCandidate, priority, term,
// incarnation, version) in their places or
// absent, strings without escapes, timestamps in toISOString's layout and
// integers without fraction or exponent. Anything else returns ok false, and
// the caller decodes value with encoding/json, which gives the answer. When
// ok is true the result is what encoding/json gives for value
// (FuzzHerdsForm checks it).
//
// Why it exists: listing the registry decodes every entry, and with
// encoding/json alone the decoding is most of what Processes costs at 10,000
// entries (docs/performance.md, row 7).
func herdsForm(value string) (w ProcessInfo, ok bool) {
	d := scanner{s: value}
	ok = d.head(&w) && d.capabilities(&w.Capabilities) && d.optionals(&w) &&
		d.lit(`}`) && d.i == len(d.s)
	return w, ok
}

// head reads the opening brace and the members before capabilities:
// processId, nodeId, role and lastSeen.
func (d *scanner) head(w *ProcessInfo) bool {
	var ok bool
	if !d.lit(`{"processId":`) {
		return false
	}
	if w.ProcessID, ok = d.str(); !ok || !d.lit(`,"nodeId":`) {
		return false
	}
	if w.NodeID, ok = d.str(); !ok || !d.lit(`,"role":`) {
		return false
	}
	var role string
	if role, ok = d.str(); !ok || !d.lit(`,"lastSeen":`) {
		return false
	}
	w.Role = internRole(role)
	w.LastSeen, ok = d.time()
	return ok
}

// capabilities reads the capabilities member, its name included, with its
// three members in their order.
func (d *scanner) capabilities(c *Capabilities) bool {
	var ok bool
	if !d.lit(`,"capabilities":{"canProcessDetections":`) {
		return false
	}
	if c.CanProcessDetections, ok = d.boolean(); !ok || !d.lit(`,"maxSubscriptions":`) {
		return false
	}
	var n int64
	if n, ok = d.int(); !ok || !d.lit(`,"preferredWorkload":`) {
		return false
	}
	c.MaxSubscriptions = int(n)
	if n, ok = d.int(); !ok || !d.lit(`}`) {
		return false
	}
	c.PreferredWorkload = int(n)
	return true
}

// optionals reads the optional members that come next, each in its place.
func (d *scanner) optionals(w *ProcessInfo) bool {
	return optional(d, `,"identifier":`, &w.Identifier, (*scanner).str) &&
		optional(d, `,"registeredAt":`, &w.RegisteredAt, (*scanner).time) &&
		optional(d, `,"metadata":`, &w.Metadata, (*scanner).metadata) &&
		optional(d, `,"nonCandidate":`, &w.NonCandidate, (*scanner).boolean) &&
		optional(d, `,"priority":`, &w.Priority, (*scanner).priority) &&
		optional(d, `,"term":`, &w.Term, (*scanner).int) &&
		optional(d, `,"incarnation":`, &w.Incarnation, (*scanner).str) &&
		optional(d, `,"version":`, &w.Version, (*scanner).int)
}

// optional reads the optional member whose name and colon are key, when
// it comes next, into *v with read. It reports false when the member is
// there and read fails.
func optional[T any](d *scanner, key string, v *T, read func(*scanner) (T, bool)) bool {
	if !d.lit(key) {
		return true
	}
	var ok bool
	*v, ok = read(d)
	return ok
}

// internRole returns the constants for the two roles, so that decoding does
// not keep a copy per entry.
func internRole(s string) Role {
	switch s {
	case string(RoleSlave):
		return RoleSlave
	case string(RoleMaster):
		return RoleMaster
	}
	return Role(s)
}

// scanner walks a JSON text; each method consumes one token on success.
type scanner struct {
	s string
	i int
}

// lit consumes lit when the text goes on with it.
func (d *scanner) lit(lit string) bool {
	if strings.HasPrefix(d.s[d.i:], lit) {
		d.i += len(lit)
		return true
	}
	return false
}

// str reads a string without escapes whose bytes are valid UTF-8, the case
// in which the JSON text is the value itself.
func (d *scanner) str() (string, bool) {
	s, i := d.s, d.i
	if i >= len(s) || s[i] != '"' {
		return "", false
	}
	i++
	start := i
	var high byte // the OR of every byte: >= utf8.RuneSelf when not ASCII
	for ; i < len(s); i++ {
		c := s[i]
		if c == '"' {
			v := s[start:i]
			if high >= utf8.RuneSelf && !utf8.ValidString(v) {
				return "", false
			}
			d.i = i + 1
			return v, true
		}
		if c == '\\' || c < 0x20 {
			return "", false
		}
		high |= c
	}
	return "", false
}

// int reads an integer in JSON's grammar without fraction or exponent, of
// at most 18 digits (so that it cannot overflow).
func (d *scanner) int() (int64, bool) {
	neg := d.lit("-")
	start := d.i
	var n int64
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		n = n*10 + int64(d.s[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	if digits == 0 || digits > 18 || (digits > 1 && d.s[start] == '0') {
		return 0, false
	}
	if d.i < len(d.s) {
		switch d.s[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

// priority reads an integer that fits an int (on every platform: 32 bits),
// so that encoding/json, which refuses one that overflows, agrees.
func (d *scanner) priority() (int, bool) {
	n, ok := d.int()
	if !ok || n < math.MinInt32 || n > math.MaxInt32 {
		return 0, false
	}
	return int(n), true
}

func (d *scanner) boolean() (bool, bool) {
	if d.lit("true") {
		return true, true
	}
	return false, d.lit("false")
}

// time reads a timestamp in exactly the layout herd writes,
// "2006-01-02T15:04:05.000Z", or "" for the zero time; the lenient forms
// are encoding/json's work.
func (d *scanner) time() (time.Time, bool) {
	s, ok := d.str()
	switch {
	case !ok:
		return time.Time{}, false
	case s == "":
		return time.Time{}, true // the zero time, as MarshalJSON writes it
	case !timeShaped(s):
		return time.Time{}, false
	}
	year, month, day := digits(s[0:4]), digits(s[5:7]), digits(s[8:10])
	hour, minute, sec, ms := digits(s[11:13]), digits(s[14:16]), digits(s[17:19]), digits(s[20:23])
	if !validDate(year, month, day) || !validClock(hour, minute, sec, ms) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, ms*int(time.Millisecond), time.UTC), true
}

// timeShaped reports whether s is as long as wire.TimeLayout and has the
// layout's separators in their places; digits reads the digits between.
func timeShaped(s string) bool {
	return len(s) == len(wire.TimeLayout) &&
		s[4] == '-' && s[7] == '-' && s[10] == 'T' && s[13] == ':' && s[16] == ':' && s[19] == '.' && s[23] == 'Z'
}

// digits reads s as a decimal number; -1 when s holds a byte that is not a
// digit.
func digits(s string) int {
	n := 0
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// validDate reports whether year, month and day, each -1 when it was not
// digits, name a day of the proleptic Gregorian calendar.
func validDate(year, month, day int) bool {
	return year >= 0 && month >= 1 && month <= 12 && day >= 1 && day <= daysIn(year, month)
}

// validClock reports whether hour, minute, sec and ms, each -1 when it was
// not digits, name a time of day to the millisecond; a leap second is not
// one.
func validClock(hour, minute, sec, ms int) bool {
	return hour >= 0 && hour <= 23 && minute >= 0 && minute <= 59 && sec >= 0 && sec <= 59 && ms >= 0
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// metadata reads null or an object; the object, free-form, goes to
// encoding/json once its extent is known.
func (d *scanner) metadata() (map[string]any, bool) {
	if d.lit("null") {
		return nil, true
	}
	if d.i >= len(d.s) || d.s[d.i] != '{' {
		return nil, false
	}
	start := d.i
	if !d.skipComposite() {
		return nil, false
	}
	var m map[string]any
	if json.Unmarshal([]byte(d.s[start:d.i]), &m) != nil {
		return nil, false
	}
	return m, true
}

// maxMetadataDepth is the deepest metadata herdsForm takes; deeper values
// go to encoding/json with the whole entry, whose nesting limit counts the
// entry's own level too.
const maxMetadataDepth = 1000

// skipComposite moves past the object or array starting at d.i by counting
// brackets outside strings. It does not validate: the caller hands the text
// it spans to encoding/json.
func (d *scanner) skipComposite() bool {
	depth := 0
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case '{', '[':
			if depth++; depth > maxMetadataDepth {
				return false
			}
		case '}', ']':
			depth--
			if depth == 0 {
				d.i++
				return true
			}
		case '"':
			d.i++
			for d.i < len(d.s) && d.s[d.i] != '"' {
				if d.s[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
		}
		d.i++
	}
	return false
}
