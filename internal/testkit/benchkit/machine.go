package benchkit

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a run took place.
type Machine struct {
	// CPUs is the number of CPUs this process may use (what nproc prints).
	CPUs int
	// CPUModel is the first "model name" of /proc/cpuinfo; "unknown" elsewhere.
	CPUModel string
	// OS and Arch are runtime.GOOS and runtime.GOARCH.
	OS, Arch string
	// GoVersion is runtime.Version().
	GoVersion string
	// LoadAvg is the first three fields of /proc/loadavg at the start of
	// the run ("" when unknown): the machine may be shared.
	LoadAvg string
	// Date is when the run started, in UTC.
	Date time.Time
}

// ThisMachine describes the machine this process runs on, now.
func ThisMachine() Machine {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		CPUModel:  "unknown",
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		GoVersion: runtime.Version(),
		Date:      time.Now().UTC(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if model := CPUModel(string(b)); model != "" {
			m.CPUModel = model
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// String describes the machine for a report: "2 CPUs (nproc), AMD EPYC
// 7B13, linux/amd64; load average 0.52 0.31 0.20 at start (the machine is
// shared)".
func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs (nproc), %s, %s/%s", m.CPUs, m.CPUModel, m.OS, m.Arch)
	if m.LoadAvg != "" {
		s += "; load average " + m.LoadAvg + " at start (the machine is shared)"
	}
	return s
}

// When is the run's date as the reports print it: "2026-01-02 03:04 UTC".
func (m Machine) When() string { return m.Date.Format("2006-01-02 15:04 UTC") }

// CPUModel returns the first "model name" in the text of /proc/cpuinfo,
// or "" when there is none.
func CPUModel(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
