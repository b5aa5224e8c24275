package rdb

// The readers of a script's reply, shared by the parsers: a reply's shape is
// checked here, once, and each parser says only what the elements mean.

// array returns reply as an array of n elements; ok is false for a reply
// that is not an array or has another length.
func array(reply any, n int) (arr []any, ok bool) {
	arr, ok = reply.([]any)
	return arr, ok && len(arr) == n
}

// fields is a script's reply array read by position. A read of an element
// that is missing or of another type than asked gives the zero value and
// clears ok, so that a parser reads every element it needs and checks ok
// once.
type fields struct {
	arr []any
	ok  bool
}

// fieldsOf reads reply as an array of n elements; ok starts false for a
// reply of another shape.
func fieldsOf(reply any, n int) fields {
	arr, ok := array(reply, n)
	return fields{arr: arr, ok: ok}
}

// at returns element i, or nil when there is none.
func (f *fields) at(i int) any {
	if i >= len(f.arr) {
		return nil
	}
	return f.arr[i]
}

// intAt returns element i, an integer.
func (f *fields) intAt(i int) int64 {
	v, ok := f.at(i).(int64)
	f.ok = f.ok && ok
	return v
}

// countAt returns element i, an integer that is not negative.
func (f *fields) countAt(i int) int64 {
	v := f.intAt(i)
	f.ok = f.ok && v >= 0
	return v
}

// strAt returns element i, a string.
func (f *fields) strAt(i int) string {
	v, ok := f.at(i).(string)
	f.ok = f.ok && ok
	return v
}

// flagAt returns element i, the integer 0 or 1, as a bool.
func (f *fields) flagAt(i int) bool {
	set, ok := flag(f.at(i))
	f.ok = f.ok && ok
	return set
}

// stringsAt returns element i, an array of strings; nil when it is empty.
func (f *fields) stringsAt(i int) []string {
	l, ok := appendStrings(nil, f.at(i))
	f.ok = f.ok && ok
	return l
}

// flag reads a reply element that is the integer 0 or 1; ok is false for
// anything else.
func flag(v any) (set, ok bool) {
	n, ok := v.(int64)
	return n == 1, ok && (n == 0 || n == 1)
}

// appendStrings appends the elements of v, an array of strings, to dst; ok
// is false, and the list nil, when v is anything else.
func appendStrings(dst []string, v any) (list []string, ok bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		dst = append(dst, s)
	}
	return dst, true
}
