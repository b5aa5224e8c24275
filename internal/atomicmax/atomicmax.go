// Package atomicmax holds the one atomic maximum herd keeps wherever a term
// may only rise: the highest term the election has observed, the fence of a
// pubsub or durable receiver, the last term whose backlog a durable router
// adopted.
package atomicmax

import "sync/atomic"

// Raise sets v to x when x is above v's value, and reports whether it did.
// It is safe for concurrent use, as v is: the value never goes down, and of
// concurrent calls the highest x wins.
func Raise(v *atomic.Int64, x int64) bool {
	for {
		cur := v.Load()
		if x <= cur {
			return false
		}
		if v.CompareAndSwap(cur, x) {
			return true
		}
	}
}
