// Package nilclient tells whether a Redis client is missing: nil, or a typed
// nil such as a (*redis.Client)(nil) stored in a redis.UniversalClient. An
// interface holding a typed nil is not == nil, and the first method called on
// it panics; every herd constructor asks Is instead, so both are refused
// with the same error.
package nilclient

import "reflect"

// Is reports whether client is nil or an interface holding a nil pointer
// (or another nil value of a nilable kind).
func Is(client any) bool {
	if client == nil {
		return true
	}
	v := reflect.ValueOf(client)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}
