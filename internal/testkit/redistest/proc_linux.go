package redistest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// waitStopped waits until the kernel reports pid stopped (state T) when
// stopped is true, or not stopped when false, so that Pause returns only
// once the server can no longer answer.
func waitStopped(pid int, stopped bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		state, err := procState(pid)
		if err != nil {
			return err
		}
		if (state == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still in state %c after %v", pid, state, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// procState reads the one-letter state of pid from /proc/<pid>/stat.
func procState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read state of pid %d: %w", pid, err)
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses, so look
	// after the last ')'.
	j := bytes.LastIndexByte(b, ')')
	if j < 0 || j+2 >= len(b) {
		return 0, fmt.Errorf("read state of pid %d: malformed %q", pid, b)
	}
	return b[j+2], nil
}
