//go:build !linux

package redisproc

import "syscall"

// SysProcAttr returns nil: outside Linux there is no parent-death signal,
// so only the caller's own cleanup stops a server.
func SysProcAttr() *syscall.SysProcAttr { return nil }
