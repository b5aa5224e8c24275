package metrics_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/metrics"
)

// probe serves one request to h and returns the status code and the report.
func probe(t testing.TB, h http.Handler, method string) (int, metrics.HealthReport, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/", nil))
	var rep metrics.HealthReport
	if method != http.MethodHead {
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	return rec.Code, rep, rec.Body.String()
}

// The probes follow the election's lifecycle and Redis's answers.
func TestHealthProbes(t *testing.T) {
	mr, c := newMini(t)
	e := newElection(t, c, fastConfig("a"))
	live, ready := metrics.Liveness(e), metrics.Readiness(e, time.Second)

	type want struct {
		code   int
		status string
		role   string
	}
	check := func(what string, h http.Handler, w want) metrics.HealthReport {
		t.Helper()
		code, rep, body := probe(t, h, http.MethodGet)
		if code != w.code || rep.Status != w.status || (w.role != "*" && rep.Role != w.role) || rep.Lock != testLock || rep.NodeID != "a" {
			t.Fatalf("%s: %d %s, want %d with status %q and role %q", what, code, body, w.code, w.status, w.role)
		}
		return rep
	}
	check("liveness before Start", live, want{503, metrics.StatusNotRunning, ""})
	check("readiness before Start", ready, want{503, metrics.StatusNotRunning, ""})

	// Redis refuses everything: Start cannot resolve the first election.
	mr.SetError("LOADING simulated outage")
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		started <- e.Start(ctx)
	}()
	deadline := time.Now().Add(waitLimit)
	for !e.Status().Running {
		if time.Now().After(deadline) {
			t.Fatal("the election is not running after Start")
		}
		time.Sleep(time.Millisecond)
	}
	check("liveness while starting", live, want{200, metrics.StatusOK, ""})
	check("readiness while starting", ready, want{503, metrics.StatusStarting, ""})
	mr.SetError("")
	if err := <-started; err != nil {
		t.Fatal(err)
	}

	check("liveness of the master", live, want{200, metrics.StatusOK, "master"})
	rep := check("readiness of the master", ready, want{200, metrics.StatusOK, "master"})
	if rep.Term == 0 || rep.Term != e.Term() || rep.Master != "a" || rep.MasterTerm != rep.Term || rep.ObservedTerm != rep.Term || rep.Error != "" {
		t.Fatalf("readiness of the master: %+v, term %d", rep, e.Term())
	}
	if code, _, body := probe(t, ready, http.MethodHead); code != 200 || body != "" {
		t.Fatalf("HEAD: %d %q, want 200 without a body", code, body)
	}

	// Redis fails the check: not ready, still alive.
	mr.SetError("LOADING simulated outage")
	// (The role is not checked: the master may fence itself meanwhile.)
	rep = check("readiness without Redis", ready, want{503, metrics.StatusRedisUnreachable, "*"})
	if rep.Error == "" {
		t.Fatal("readiness without Redis gives no error")
	}
	check("liveness without Redis", live, want{200, metrics.StatusOK, "*"})
	mr.SetError("")

	stop(t, e)
	check("liveness after Stop", live, want{503, metrics.StatusNotRunning, ""})
	check("readiness after Stop", ready, want{503, metrics.StatusNotRunning, ""})
}

// In standalone mode the probes need no Redis at all.
func TestHealthProbesStandalone(t *testing.T) {
	cfg := fastConfig("solo")
	cfg.Standalone = true
	e, err := masterelection.New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, e) })
	start(t, e)
	code, rep, body := probe(t, metrics.Readiness(e, 0), http.MethodGet)
	if code != 200 || rep.Role != "master" || rep.Master != "solo" || rep.MasterTerm != e.Term() {
		t.Fatalf("readiness: %d %s", code, body)
	}
}
