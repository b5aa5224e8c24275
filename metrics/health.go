package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/herdkit/herd/masterelection"
)

// The values of HealthReport.Status.
const (
	// StatusOK: alive (Liveness), or ready (Readiness).
	StatusOK = "ok"
	// StatusNotRunning: the election is not running: before Start, after
	// Stop, or after a Start that gave up.
	StatusNotRunning = "not running"
	// StatusStarting: the election runs, but its first election has not
	// resolved yet (Redis unreachable at Start, say).
	StatusStarting = "starting"
	// StatusRedisUnreachable: the first election resolved, but Redis did not
	// answer the readiness check in time, or answered with an error.
	StatusRedisUnreachable = "redis unreachable"
)

// DefaultReadinessTimeout bounds the Redis check of Readiness when it is
// given no positive timeout.
const DefaultReadinessTimeout = time.Second

// HealthReport is the JSON body of the Liveness and Readiness handlers.
type HealthReport struct {
	// Status is StatusOK, or what is wrong.
	Status string `json:"status"`
	// Lock and NodeID name the election and this process.
	Lock   string `json:"lock"`
	NodeID string `json:"nodeId"`
	// Role is "master" or "slave" while the election runs and its first
	// election has resolved, else empty.
	Role string `json:"role,omitempty"`
	// Term is this process's fencing term while it is master, else 0.
	Term int64 `json:"term,omitempty"`
	// ObservedTerm is the highest term this process has seen.
	ObservedTerm int64 `json:"observedTerm"`
	// Master and MasterTerm are the master and its term as Redis named them
	// in the readiness check (Master is empty when no process holds the
	// lock); Liveness leaves them empty.
	Master     string `json:"master,omitempty"`
	MasterTerm int64  `json:"masterTerm,omitempty"`
	// Error is the error of the readiness check, if any.
	Error string `json:"error,omitempty"`
}

// Liveness returns the handler of a liveness probe for e: 200 while e's
// election loop runs (from Start until Stop, or until a Start that gave
// up), else 503, with a HealthReport as JSON body. It makes no Redis call:
// a process that cannot reach Redis is alive (it keeps trying, and fences
// itself); restarting it would not help.
func Liveness(e *masterelection.MasterElection) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := e.Status()
		rep := report(e, st)
		code := http.StatusOK
		if !st.Running {
			rep.Status, code = StatusNotRunning, http.StatusServiceUnavailable
		}
		writeReport(w, r, code, rep)
	})
}

// Readiness returns the handler of a readiness probe for e: 200 once e's
// first election has resolved (this process knows whether it is master or
// slave) and Redis answers a check of the lock within timeout
// (DefaultReadinessTimeout when timeout is not positive), else 503, with a
// HealthReport as JSON body. Each request makes that one Redis call (one
// round trip; none in standalone mode).
func Readiness(e *masterelection.MasterElection, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = DefaultReadinessTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := e.Status()
		if !st.Running || !st.Resolved {
			rep := report(e, st)
			rep.Status = StatusStarting
			if !st.Running {
				rep.Status = StatusNotRunning
			}
			writeReport(w, r, http.StatusServiceUnavailable, rep)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		master, term, err := e.Master(ctx)
		cancel()
		rep := report(e, e.Status()) // after the round trip: the role as of now
		rep.Master, rep.MasterTerm = master, term
		if err != nil {
			rep.Status, rep.Error = StatusRedisUnreachable, err.Error()
			writeReport(w, r, http.StatusServiceUnavailable, rep)
			return
		}
		writeReport(w, r, http.StatusOK, rep)
	})
}

// report is the part of a HealthReport that the status gives.
func report(e *masterelection.MasterElection, st masterelection.Status) HealthReport {
	rep := HealthReport{Status: StatusOK, Lock: e.LockName(), NodeID: e.NodeID(), Term: st.Term, ObservedTerm: st.ObservedTerm}
	switch {
	case !st.Running || !st.Resolved:
	case st.IsMaster:
		rep.Role = "master"
	default:
		rep.Role = "slave"
	}
	return rep
}

func writeReport(w http.ResponseWriter, r *http.Request, code int, rep HealthReport) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if r.Method == http.MethodHead {
		return
	}
	b, _ := json.Marshal(rep) // a struct of strings and integers always encodes
	_, _ = w.Write(append(b, '\n'))
}
