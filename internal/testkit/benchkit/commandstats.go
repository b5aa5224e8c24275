package benchkit

import (
	"slices"
	"strconv"
	"strings"
)

// CommandStats maps a command name as INFO commandstats spells it ("get",
// "evalsha", "client|setinfo") to its number of calls.
type CommandStats map[string]int64

// ParseCommandStats reads the calls of every command from an INFO
// commandstats reply. Lines it does not understand are skipped.
func ParseCommandStats(info string) CommandStats {
	out := CommandStats{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k != "calls" {
				continue
			}
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// Sub returns the calls made between before and s, leaving out commands
// with no new calls.
func (s CommandStats) Sub(before CommandStats) CommandStats {
	out := CommandStats{}
	for name, n := range s {
		if d := n - before[name]; d > 0 {
			out[name] = d
		}
	}
	return out
}

// Total is the sum of the calls of every command except those named in
// except.
func (s CommandStats) Total(except ...string) int64 {
	var t int64
	for name, n := range s {
		if !slices.Contains(except, name) {
			t += n
		}
	}
	return t
}

// CommandUsec reads the calls of command and the microseconds Redis spent
// executing them from an INFO commandstats reply.
func CommandUsec(info, command string) (calls, usec int64, ok bool) {
	for _, line := range strings.Split(info, "\n") {
		name, rest, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found || name != "cmdstat_"+command {
			continue
		}
		var gotCalls, gotUsec bool
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case err != nil:
			case k == "calls":
				calls, gotCalls = n, true
			case k == "usec":
				usec, gotUsec = n, true
			}
		}
		return calls, usec, gotCalls && gotUsec
	}
	return 0, 0, false
}
