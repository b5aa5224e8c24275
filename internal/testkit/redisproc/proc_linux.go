package redisproc

import "syscall"

// SysProcAttr binds a server to the program that starts it: the kernel
// sends it SIGKILL when the thread that started it exits, which for a Go
// program means when the program exits (even when killed, as a test binary
// is by -timeout), since the runtime does not retire threads that are not
// locked to a goroutine.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
