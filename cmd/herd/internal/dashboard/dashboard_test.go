package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/cmd/herd/internal/operate"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// served runs a dashboard of lock on inst behind a test server, until the
// test ends.
func served(t *testing.T, inst *redistest.Instance, lock string, o Options) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := operate.Dial(ctx, herdtest.URL(inst), lock)
	if err != nil {
		t.Fatal(err)
	}
	r, err := operate.NewReader(ctx, conn, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := New(r, operate.NewWatcher(r, 250*time.Millisecond), o)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
		_ = conn.Close()
	})
	herdtest.Eventually(t, 5*time.Second, "the first read", func() bool {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return srv
}

// addDeadLetter adds a dead letter to the dead-letter stream of lock, as a
// durable.Consumer that gave up on an entry of worker-1's inbox writes it.
func addDeadLetter(t *testing.T, inst *redistest.Instance, lock string) {
	t.Helper()
	k := keyspace.NewKeys(lock, false)
	envelope := `{"id":"5b0f7c1e-8d52-4c55-9b1f-3a7e2d9c4f10","from":"api-1","term":1,"type":"email","payload":null,"sentAt":""}`
	herdtest.Admin(t, inst.Client(t), "XADD", k.Dead, "*", rdb.InboxFieldMessage, envelope, rdb.InboxFieldTerm, "1",
		rdb.DeadFieldDeliveries, "10", rdb.DeadFieldError, "smtp: connection refused", rdb.DeadFieldProcess, "worker-1",
		rdb.DeadFieldInbox, k.Inbox("worker-1"))
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func post(t *testing.T, url, contentType, origin, body string) (int, stepDownAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a stepDownAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, a
}

// The API: status, health, metrics, the event stream, and a step-down that
// only -allow-step-down, a JSON body and the same origin let through.
func TestAPI(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	nodes := herdtest.Herd(t, inst, "dash", "a", "b")

	off := served(t, inst, "dash", Options{})
	code, body := get(t, off.URL+"/api/status")
	var st struct {
		Lock   string
		Master struct{ NodeID string }
	}
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || st.Lock != "dash" || st.Master.NodeID != "a" {
		t.Fatalf("/api/status: %d %s", code, body)
	}
	code, body = get(t, off.URL+"/metrics")
	for _, want := range []string{`herd_cluster_has_master{lock="dash"} 1`, `herd_cluster_processes{lock="dash",role="slave"} 1`,
		`herd_cluster_up{lock="dash"} 1`, `herd_cluster_failovers_total{lock="dash"} 0`, `herd_cluster_dead_letters{lock="dash"} 0`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	if code, body := get(t, off.URL+"/healthz"); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	code, page := get(t, off.URL+"/")
	if code != 200 || !strings.Contains(page, `<script src="app.js"`) {
		t.Fatalf("/: %d", code)
	}
	if code, a := post(t, off.URL+"/api/step-down", "application/json", "", `{"to":""}`); code != http.StatusForbidden || !strings.Contains(a.Error, "-allow-step-down") {
		t.Fatalf("step-down without -allow-step-down: %d %+v", code, a)
	}

	// The stream starts with the model.
	resp, err := http.Get(off.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(resp.Body)
	first, _ := lines.ReadString('\n')
	data, _ := lines.ReadString('\n')
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || first != "event: model\n" || !strings.Contains(data, `"allowStepDown":false`) ||
		!strings.Contains(data, `"deadLetters":0`) {
		t.Fatalf("/api/events: %s %q %q", resp.Header.Get("Content-Type"), first, data)
	}

	// A dead letter: the model and the metrics count it.
	addDeadLetter(t, inst, "dash")
	herdtest.Eventually(t, 5*time.Second, "the dead letter counted", func() bool {
		_, body := get(t, off.URL+"/metrics")
		return strings.Contains(body, `herd_cluster_dead_letters{lock="dash"} 1`)
	})
	resp, err = http.Get(off.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	lines = bufio.NewReader(resp.Body)
	_, _ = lines.ReadString('\n')
	data, _ = lines.ReadString('\n')
	resp.Body.Close()
	if !strings.Contains(data, `"deadLetters":1`) {
		t.Fatalf("/api/events after a dead letter: %q", data)
	}

	on := served(t, inst, "dash", Options{AllowStepDown: true})
	if code, _ := post(t, on.URL+"/api/step-down", "text/plain", "", `{"to":""}`); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d", code)
	}
	if code, _ := post(t, on.URL+"/api/step-down", "application/json", "https://evil.example", `{"to":""}`); code != http.StatusForbidden {
		t.Errorf("cross-origin: %d", code)
	}
	if code, a := post(t, on.URL+"/api/step-down", "application/json", "", `{"to":"zed"}`); code != http.StatusConflict || a.Exit != operate.ExitNotDelivered {
		t.Errorf("to nobody: %d %+v", code, a)
	}
	code, a := post(t, on.URL+"/api/step-down", "application/json", on.URL, `{"to":"b"}`)
	if code != 200 || !a.OK || a.Result == nil || a.Result.To != "b" {
		t.Fatalf("step-down to b: %d %+v", code, a)
	}
	herdtest.Eventually(t, 5*time.Second, "b master", nodes[1].IsMaster)
	herdtest.Eventually(t, 5*time.Second, "the failover counted", func() bool {
		_, body := get(t, on.URL+"/metrics")
		return strings.Contains(body, `herd_cluster_failovers_total{lock="dash"} 1`)
	})
}
