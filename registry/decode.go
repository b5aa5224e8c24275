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
		d.s[d.i:] == `}` // the closing brace ends the text
	return w, ok
}

// head reads the opening brace and the members before capabilities:
// processId, nodeId, role and lastSeen.
func (d *scanner) head(w *ProcessInfo) bool {
	var role string
	ok := required(d, `{"processId":`, &w.ProcessID, (*scanner).str) &&
		required(d, `,"nodeId":`, &w.NodeID, (*scanner).str) &&
		required(d, `,"role":`, &role, (*scanner).str) &&
		required(d, `,"lastSeen":`, &w.LastSeen, (*scanner).time)
	w.Role = internRole(role)
	return ok
}

// capabilities reads the capabilities member, its name included, with its
// three members in their order.
func (d *scanner) capabilities(c *Capabilities) bool {
	var maxSubscriptions, preferredWorkload int64
	ok := required(d, `,"capabilities":{"canProcessDetections":`, &c.CanProcessDetections, (*scanner).boolean) &&
		required(d, `,"maxSubscriptions":`, &maxSubscriptions, (*scanner).int) &&
		required(d, `,"preferredWorkload":`, &preferredWorkload, (*scanner).int) &&
		d.lit(`}`)
	c.MaxSubscriptions, c.PreferredWorkload = int(maxSubscriptions), int(preferredWorkload)
	return ok
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

// required reads the member whose name and colon are key into *v with
// read. It reports false when the member does not come next or read fails.
func required[T any](d *scanner, key string, v *T, read func(*scanner) (T, bool)) bool {
	if !d.lit(key) {
		return false
	}
	var ok bool
	*v, ok = read(d)
	return ok
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

// peek returns the next byte, or 0 at the end of the text (a byte no
// caller looks for: a JSON text holds none outside strings).
func (d *scanner) peek() byte {
	if d.i < len(d.s) {
		return d.s[d.i]
	}
	return 0
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
	if d.peek() != '"' {
		return "", false
	}
	s, i := d.s, d.i+1
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
	sign := int64(1)
	if d.lit("-") {
		sign = -1
	}
	start := d.i
	n := d.digitRun()
	if !integerDigits(d.s[start:d.i]) {
		return 0, false
	}
	switch d.peek() {
	case '.', 'e', 'E': // a fraction or an exponent
		return 0, false
	}
	return sign * n, true
}

// digitRun consumes the decimal digits that come next and returns their
// value, which is only right for at most 18 of them.
func (d *scanner) digitRun() int64 {
	var n int64
	for d.i < len(d.s) && isDigit(d.s[d.i]) {
		n = n*10 + int64(d.s[d.i]-'0')
		d.i++
	}
	return n
}

// integerDigits reports whether run, the digits of an integer, are what
// JSON allows and an int64 holds whatever they are: 1 to 18 digits, no
// leading zero.
func integerDigits(run string) bool {
	return len(run) == 1 || (inRange(len(run), 2, 18) && run[0] != '0')
}

// isDigit reports whether c is a decimal digit.
func isDigit(c byte) bool {
	return '0' <= c && c <= '9'
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
		if !isDigit(c) {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// validDate reports whether year, month and day, each -1 when it was not
// digits, name a day of the proleptic Gregorian calendar.
func validDate(year, month, day int) bool {
	return year >= 0 && inRange(month, 1, 12) && inRange(day, 1, daysIn(year, month))
}

// validClock reports whether hour, minute, sec and ms, each -1 when it was
// not digits, name a time of day to the millisecond; a leap second is not
// one.
func validClock(hour, minute, sec, ms int) bool {
	return inRange(hour, 0, 23) && inRange(minute, 0, 59) && inRange(sec, 0, 59) && ms >= 0
}

// inRange reports whether lo <= v <= hi.
func inRange(v, lo, hi int) bool {
	return lo <= v && v <= hi
}

// monthDays are the days of each month (1 to 12) in a common year.
var monthDays = [13]int{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// daysIn returns the number of days of month (1 to 12) of year.
func daysIn(year, month int) int {
	if month == 2 && leapYear(year) {
		return 29
	}
	return monthDays[month]
}

// leapYear reports whether year is a leap year of the proleptic Gregorian
// calendar.
func leapYear(year int) bool {
	return year%4 == 0 && (year%100 != 0 || year%400 == 0)
}

// metadata reads null or an object; the object, free-form, goes to
// encoding/json once its extent is known.
func (d *scanner) metadata() (map[string]any, bool) {
	if d.lit("null") {
		return nil, true
	}
	if d.peek() != '{' {
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
			d.skipString()
		}
		d.i++
	}
	return false
}

// skipString moves from the opening quote at d.i to the closing one (or
// the end of the text), stepping over each escaped byte.
func (d *scanner) skipString() {
	d.i++
	for d.i < len(d.s) && d.s[d.i] != '"' {
		if d.s[d.i] == '\\' {
			d.i++
		}
		d.i++
	}
}
