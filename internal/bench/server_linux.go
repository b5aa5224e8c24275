package bench

import "syscall"

// sysProcAttr makes the kernel kill the server when the thread that started
// it exits, so a killed herdbench does not leave a server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
