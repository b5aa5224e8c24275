package cli

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/cmd/herd/internal/operate"
	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/testkit/redistest"
)

// deadHerd is a herd of a master a and a slave b, a durable Router of a,
// and a durable Consumer of b whose handler fails until ok is set.
type deadHerd struct {
	env     map[string]string
	router  *durable.Router
	con     *durable.Consumer
	ok      atomic.Bool
	handled chan durable.Delivery
}

func newDeadHerd(t *testing.T, inst *redistest.Instance) *deadHerd {
	t.Helper()
	nodes := herdtest.Herd(t, inst, "orders", "a", "b") // both registered: a durable Router sends only to live processes
	h := &deadHerd{env: map[string]string{"REDIS_URL": herdtest.URL(inst)}, handled: make(chan durable.Delivery, 10)}
	var err error
	if h.router, err = durable.NewRouter(inst.Client(t), nodes[0], nil, durable.Config{}); err != nil {
		t.Fatal(err)
	}
	h.con, err = durable.NewConsumer(inst.Client(t), "b",
		durable.Config{Terms: nodes[1], RetryDelay: 10 * time.Millisecond, MaxDeliveries: 3, Block: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.con.Handle("email", func(_ context.Context, d durable.Delivery) error {
		if !h.ok.Load() {
			return errors.New("smtp: connection refused")
		}
		h.handled <- d
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.con.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.con.Close() })
	return h
}

// bury sends one email to b and waits until b's consumer has given up on
// it; it returns the message id.
func (h *deadHerd) bury(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := h.con.Dead()
	id, err := h.router.Send(ctx, "b", "email", map[string]string{"to": "x@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	herdtest.Eventually(t, 10*time.Second, "the dead letter", func() bool { return h.con.Dead() == before+1 })
	return id
}

// list runs herd dead list -o json.
func (h *deadHerd) list(t *testing.T) []map[string]any {
	t.Helper()
	code, out, errOut := herd(t, h.env, "-lock", "orders", "dead", "list", "-o", "json")
	var ls []map[string]any
	if err := json.Unmarshal([]byte(out), &ls); code != 0 || err != nil {
		t.Fatalf("dead list -o json: exit %d, %v: %s %s", code, err, out, errOut)
	}
	return ls
}

// herd dead list, retry and drop against a dead letter a real Consumer
// made.
func TestDead(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		h := newDeadHerd(t, inst)
		env := h.env
		code, out, _ := herd(t, env, "-lock", "orders", "dead", "list")
		if code != 0 || out != "no dead letters in orders:dead\n" {
			t.Fatalf("dead list of none: exit %d, %q", code, out)
		}
		msgID := h.bury(t)

		// The table: one row, with the inbox, type, deliveries and error,
		// and the message id in full, though the line is then over 80
		// columns.
		code, out, errOut := herd(t, env, "dead", "-lock", "orders", "list")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || errOut != "" || len(lines) != 2 {
			t.Fatalf("dead list: exit %d, stderr %s\n%s", code, errOut, out)
		}
		if !regexp.MustCompile(`^ID +AGE +INBOX +TYPE +MESSAGE +DELIV +ERROR$`).MatchString(lines[0]) ||
			!regexp.MustCompile(`^[0-9]+-[0-9]+ +[0-9.]+m?s +b +email +`+regexp.QuoteMeta(msgID)+` +3 +smtp: conn.*$`).MatchString(lines[1]) {
			t.Fatalf("dead list:\n%s", out)
		}

		// The JSON: everything, the envelope as sent.
		ls := h.list(t)
		if len(ls) != 1 {
			t.Fatalf("%d dead letters listed", len(ls))
		}
		dl := ls[0]
		id, _ := dl["id"].(string)
		msg, _ := dl["message"].(map[string]any)
		if dl["inbox"] != "b" || dl["process"] != "b" || dl["deliveries"] != 3.0 || dl["error"] != "smtp: connection refused" ||
			msg["id"] != msgID || msg["type"] != "email" || msg["from"] != "a" || !regexp.MustCompile(`^[0-9]+-[0-9]+$`).MatchString(id) {
			t.Fatalf("dead letter %v", dl)
		}
		if _, err := time.Parse(time.RFC3339, dl["at"].(string)); err != nil {
			t.Errorf("at: %v", err)
		}
		if _, ok := dl["raw"]; ok {
			t.Errorf("raw listed beside a decoded message: %v", dl)
		}

		// Retries that cannot be: to a process not live (named, before
		// any id is tried), ids that are not there. Nothing changes.
		for _, args := range [][]string{{"-to", "ghost", id}, {"1-0", id, "-to", "ghost"}} {
			code, out, errOut = herd(t, env, append([]string{"-lock", "orders", "dead", "retry"}, args...)...)
			if code != operate.ExitError || out != "" ||
				errOut != "herd dead retry: -to ghost: no live process of that id is registered under \"orders\" (herd processes lists them); nothing retried\n" {
				t.Fatalf("retry %q: exit %d, %q %q", args, code, out, errOut)
			}
		}
		code, _, errOut = herd(t, env, "-lock", "orders", "dead", "retry", "1-0", "2-0")
		if code != operate.ExitError || !strings.Contains(errOut, "herd dead retry: dead letter 1-0: no such dead letter in orders:dead") ||
			!strings.Contains(errOut, "herd dead retry: dead letter 2-0: no such dead letter") || !strings.HasSuffix(errOut, "herd dead retry: 2 of 2 dead letters not retried (above)\n") {
			t.Fatalf("retry of two that cannot be: exit %d, %q", code, errOut)
		}
		if n := len(h.list(t)); n != 1 {
			t.Fatalf("%d dead letters after failed retries", n)
		}

		// A retry to its own inbox: the handler, which now succeeds, gets it
		// as a first delivery.
		h.ok.Store(true)
		code, out, errOut = herd(t, env, "-lock", "orders", "dead", "retry", id)
		if code != 0 || !regexp.MustCompile(`^`+id+` retried to b: entry [0-9]+-[0-9]+\n$`).MatchString(out) {
			t.Fatalf("retry: exit %d, %q %q", code, out, errOut)
		}
		select {
		case d := <-h.handled:
			if d.ID != msgID || d.Deliveries != 1 || d.Type != "email" {
				t.Fatalf("handled %+v", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the retried dead letter was not handled")
		}
		if n := len(h.list(t)); n != 0 {
			t.Fatalf("%d dead letters after the retry", n)
		}

		// Drop by id (one of them not there: dropped, the other named, exit
		// status 1), then -all.
		h.ok.Store(false)
		h.bury(t)
		id = h.list(t)[0]["id"].(string)
		code, out, errOut = herd(t, env, "-lock", "orders", "dead", "drop", id, "1-0")
		if code != operate.ExitError || out != "dropped 1 of 2 dead letters\n" ||
			errOut != "herd dead drop: 1 of 2 dead letters not found in orders:dead: 1-0 (herd dead list shows the ids)\n" {
			t.Fatalf("drop: exit %d, %q %q", code, out, errOut)
		}
		if n := len(h.list(t)); n != 0 {
			t.Fatalf("%d dead letters after the drop", n)
		}
		h.bury(t)
		h.bury(t)
		code, out, _ = herd(t, env, "-lock", "orders", "dead", "list", "-n", "1")
		if code != 0 || !strings.HasSuffix(out, "\n1 of 2 dead letters in orders:dead, oldest first; -n 0 lists them all\n") {
			t.Fatalf("dead list -n 1: exit %d, %q", code, out)
		}
		code, out, _ = herd(t, env, "-lock", "orders", "dead", "drop", "-all")
		if code != 0 || out != "dropped 2 dead letters\n" {
			t.Fatalf("drop -all: exit %d, %q", code, out)
		}
		if n := len(h.list(t)); n != 0 {
			t.Fatalf("%d dead letters after drop -all", n)
		}
		if h.con.Handled() != 1 || h.con.Dead() != 4 {
			t.Fatalf("consumer: handled %d, dead %d", h.con.Handled(), h.con.Dead())
		}
	})
}
