//go:build !linux

package redistest

import "time"

// waitStopped returns at once: without /proc there is no portable way to
// read a process's state, and the signal is delivered promptly anyway.
func waitStopped(pid int, stopped bool, timeout time.Duration) error { return nil }
