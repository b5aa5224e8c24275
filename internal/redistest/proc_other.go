//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: outside Linux there is no parent-death signal,
// so only the t.Cleanup registered by Start stops the server.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped returns at once: without /proc there is no portable way to
// read a process's state, and the signal is delivered promptly anyway.
func waitStopped(pid int, stopped bool, timeout time.Duration) error { return nil }
