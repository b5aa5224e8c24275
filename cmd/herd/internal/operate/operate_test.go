package operate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, url, lock string) *Conn {
	t.Helper()
	c, err := Dial(testCtx(t), url, lock)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func reader(t *testing.T, c *Conn) *Reader {
	t.Helper()
	r, err := NewReader(testCtx(t), c, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every bad input to Dial gives its own error and exit status.
func TestDialErrors(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	admin := inst.Client(t)
	herdtest.Admin(t, admin, "ACL", "SETUSER", "nobody", "on", ">pw", "-@all", "+hello", "+auth")
	closed := herdtest.ClosedPort(t)
	addr := inst.Options().Addr
	tests := []struct {
		name, url, lock string
		want            error
		code            int
		says            string
	}{
		{"unknown scheme", "ftp://" + addr, "l", ErrBadURL, ExitBadURL, "invalid URL scheme"},
		{"bad port", "redis://127.0.0.1:notaport", "l", ErrBadURL, ExitBadURL, "bad Redis URL"},
		{"bad db", "redis://" + addr + "/x", "l", ErrBadURL, ExitBadURL, "invalid database"},
		{"unknown option", "redis://" + addr + "?colour=red", "l", ErrBadURL, ExitBadURL, "colour"},
		{"empty", " ", "l", ErrBadURL, ExitBadURL, "empty"},
		{"password hidden", "redis://u:s3cret@127.0.0.1:notaport", "l", ErrBadURL, ExitBadURL, "xxxxx"},
		{"bad lock name", "redis://" + addr, "a b", ErrUsage, ExitUsage, "whitespace"},
		{"refused", "redis://" + closed, "l", ErrUnreachable, ExitUnreachable, "connection refused"},
		{"unknown host", "redis://no-such-host.invalid:6379", "l", ErrUnreachable, ExitUnreachable, "cannot reach Redis"},
		{"wrong password", "redis://nobody:wrong@" + addr, "l", ErrAuth, ExitAuth, "WRONGPASS"},
		{"acl", "redis://nobody:pw@" + addr, "l", ErrACL, ExitACL, "NOPERM"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial(testCtx(t), tc.url, tc.lock)
			if err == nil {
				_ = c.Close()
				t.Fatal("Dial succeeded")
			}
			if !errors.Is(err, tc.want) || ExitCode(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Dial: %v (exit %d); want %v, exit %d, saying %q", err, ExitCode(err), tc.want, tc.code, tc.says)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error repeats the password: %v", err)
			}
		})
	}
}

// A snapshot of a herd on each server: the master, every process, no
// warning; then the warnings of an inconsistent registry.
func TestSnapshot(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes := herdtest.Herd(t, inst, "snap", "a", "b", "c")
		nodes[1].SetMetadata(map[string]any{"zone": "eu-1"})
		c := dial(t, herdtest.URL(inst), "snap")
		r := reader(t, c)
		herdtest.Eventually(t, 5*time.Second, "b's metadata", func() bool {
			snap, err := r.Read(testCtx(t))
			return err == nil && len(snap.Processes) == 3 && snap.Processes[1].Info.Metadata["zone"] == "eu-1"
		})
		snap, err := r.Read(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		m := snap.Master
		if !snap.Known || m == nil || m.NodeID != "a" || m.Identifier != "svc-a" || m.Term != nodes[0].Term() {
			t.Fatalf("snapshot master %+v, want a with term %d", m, nodes[0].Term())
		}
		if m.Held < 0 || m.Held > time.Minute || m.TTL <= 0 || m.TTL > 2*time.Second {
			t.Fatalf("held %s, TTL %s", m.Held, m.TTL)
		}
		if len(snap.Warnings) != 0 {
			t.Fatalf("warnings: %q", snap.Warnings)
		}
		var roles []string
		for _, p := range snap.Processes {
			roles = append(roles, p.Info.ProcessID+"="+string(p.Info.Role))
			if p.Age < -time.Second || p.Age > 3*time.Second {
				t.Errorf("%s: age %s", p.Info.ProcessID, p.Age)
			}
		}
		if got := strings.Join(roles, " "); got != "a=master b=slave c=slave" {
			t.Fatalf("processes %s", got)
		}
		wantBackend := map[string]registry.Backend{"redis-7": registry.BackendEmulated, "redis-8": registry.BackendNative, "valkey-9": registry.BackendNative}
		for prefix, b := range wantBackend {
			if strings.HasPrefix(s.Name, prefix) && snap.Backend != b {
				t.Errorf("backend %s on %s, want %s", snap.Backend, s.Name, b)
			}
		}

		// The JSON form has exactly the fields of the status.
		b, err := json.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(sortedKeys(top), ","); got != "backend,lock,master,processes,warnings" {
			t.Fatalf("status JSON members %s", got)
		}

		// Inconsistencies: an entry with role master that does not hold
		// the lock, an entry older than its TTL, a corrupt entry.
		stale := fmt.Sprintf(`{"processId":"x","nodeId":"x","role":"master","lastSeen":%q,"capabilities":{},"term":7}`,
			time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano))
		herdtest.Admin(t, inst.Client(t), "HSET", c.Keys.Processes, "x", stale, "bad", "{not json")
		snap, err = reader(t, c).Read(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(snap.Warnings, "\n")
		for _, want := range []string{"x has role master in the registry (term 7) but does not hold the lock: a holds it",
			"x: last heartbeat 1m00s ago, older than the process TTL 3.0s", `corrupt entry: field "bad"`} {
			if !strings.Contains(all, want) {
				t.Errorf("warnings lack %q:\n%s", want, all)
			}
		}
		herdtest.Admin(t, inst.Client(t), "HDEL", c.Keys.Processes, "x", "bad")

		// No master.
		for _, n := range nodes {
			herdtest.Stop(t, n)
		}
		snap, err = r.Read(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !snap.Known || snap.Master != nil || len(snap.Warnings) != 1 || !strings.HasPrefix(snap.Warnings[0], "no master") {
			t.Fatalf("after every node stopped: known %v, master %+v, warnings %q", snap.Known, snap.Master, snap.Warnings)
		}
	})
}

func sortedKeys(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// A lock name with nothing under it is unknown, and the error lists the
// lock names on the server.
func TestUnknownLock(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	herdtest.Herd(t, inst, "orders", "a")
	herdtest.Herd(t, inst, "billing", "b")
	herdtest.Admin(t, inst.Client(t), "SET", "unrelated:term", "x")
	c := dial(t, herdtest.URL(inst), "order")
	snap, err := reader(t, c).Read(testCtx(t))
	if err != nil || snap.Known {
		t.Fatalf("read of an unknown lock: known %v, %v", snap.Known, err)
	}
	err = UnknownLock(testCtx(t), c)
	if ExitCode(err) != ExitUnknownLock || !strings.Contains(err.Error(), "look like herd's: billing, orders") ||
		!strings.Contains(err.Error(), `unknown lock name "order": nothing is registered under it`) {
		t.Fatalf("unknown lock: %v (exit %d)", err, ExitCode(err))
	}
}

// StepDown hands over to any candidate or to the one named, and says why
// when it cannot.
func TestStepDown(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes := herdtest.Herd(t, inst, "sd", "a", "b", "c")
		r := reader(t, dial(t, herdtest.URL(inst), "sd"))

		res, err := StepDown(testCtx(t), r, "", 5*time.Second)
		if err != nil || res.From != "a" || res.To == "a" || res.Term <= res.FromTerm {
			t.Fatalf("step-down: %+v, %v", res, err)
		}
		res, err = StepDown(testCtx(t), r, "a", 5*time.Second)
		if err != nil || res.To != "a" {
			t.Fatalf("step-down to a: %+v, %v", res, err)
		}
		herdtest.Eventually(t, 5*time.Second, "a master", nodes[0].IsMaster)

		for _, tc := range []struct {
			name, to string
			code     int
			says     string
		}{
			{"to itself", "a", ExitUsage, "names the master itself"},
			{"to nobody", "zed", ExitNotDelivered, "no live process of that id"},
			{"bad name", "a*", ExitUsage, "glob character"},
		} {
			_, err := StepDown(testCtx(t), r, tc.to, time.Second)
			if ExitCode(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%s: %v (exit %d), want exit %d saying %q", tc.name, err, ExitCode(err), tc.code, tc.says)
			}
		}
	})
}

// The ways a step-down does not happen: nobody listens, the master does not
// act on it, the one named is not a candidate, no master at all.
func TestStepDownRefused(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	deaf := func(lock, id string, candidate bool) {
		cfg := herdtest.Config(lock, id)
		cfg.IgnoreRemoteTransfers, cfg.NonCandidate = true, !candidate
		herdtest.Node(t, inst, cfg)
	}

	deaf("deaf", "a", true)
	deaf("deaf", "b", true)
	_, err := StepDown(testCtx(t), reader(t, dial(t, herdtest.URL(inst), "deaf")), "", time.Second)
	if ExitCode(err) != ExitNotDelivered || !strings.Contains(err.Error(), "nobody listens") {
		t.Errorf("nobody listens: %v (exit %d)", err, ExitCode(err))
	}

	deaf("deafmaster", "a", true)
	herdtest.Node(t, inst, herdtest.Config("deafmaster", "b"))
	_, err = StepDown(testCtx(t), reader(t, dial(t, herdtest.URL(inst), "deafmaster")), "", 500*time.Millisecond)
	if ExitCode(err) != ExitTimeout || !strings.Contains(err.Error(), "no new master within 500ms") {
		t.Errorf("master ignores: %v (exit %d)", err, ExitCode(err))
	}

	herdtest.Node(t, inst, herdtest.Config("paused", "a"))
	herdtest.Node(t, inst, herdtest.Config("paused", "b"))
	cfg := herdtest.Config("paused", "c")
	cfg.NonCandidate = true
	herdtest.Node(t, inst, cfg)
	r := reader(t, dial(t, herdtest.URL(inst), "paused"))
	herdtest.Eventually(t, 5*time.Second, "c registered", func() bool {
		s, err := r.Read(testCtx(t))
		return err == nil && len(s.Processes) == 3
	})
	res, err := StepDown(testCtx(t), r, "c", 5*time.Second)
	if ExitCode(err) != ExitOtherMaster || res.To == "" || res.To == "c" || !strings.Contains(err.Error(), "not c") {
		t.Errorf("to a non-candidate: %+v, %v (exit %d)", res, err, ExitCode(err))
	}

	alone := herdtest.Node(t, inst, herdtest.Config("alone", "a"))
	res, err = StepDown(testCtx(t), reader(t, dial(t, herdtest.URL(inst), "alone")), "", 5*time.Second)
	if ExitCode(err) != ExitOtherMaster || res.To != "a" || !strings.Contains(err.Error(), "took the lock back") {
		t.Errorf("alone: %+v, %v (exit %d)", res, err, ExitCode(err))
	}
	herdtest.Stop(t, alone)
	_, err = StepDown(testCtx(t), reader(t, dial(t, herdtest.URL(inst), "alone")), "", time.Second)
	if ExitCode(err) != ExitNotDelivered || !strings.Contains(err.Error(), "no master") {
		t.Errorf("no master: %v (exit %d)", err, ExitCode(err))
	}
}

// TestStepDownSendsAgain: pub/sub keeps nothing for a master whose
// subscription is reconnecting, so StepDown publishes its request again
// until a new master shows. Here a deaf master stands for one that missed
// the first copy: the test's listener hands over for it on the second.
// Every copy names the master's term.
func TestStepDownSendsAgain(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	cfg := herdtest.Config("again", "a")
	cfg.IgnoreRemoteTransfers = true
	master := herdtest.Node(t, inst, cfg)
	herdtest.Node(t, inst, herdtest.Config("again", "b"))
	term := master.Term()

	listener := inst.Client(t)
	sub := listener.Subscribe(testCtx(t), master.Keys().Control)
	defer sub.Close()
	if _, err := sub.Receive(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	copies := make(chan int, 1)
	go func() {
		n := 0
		for msg := range sub.Channel() {
			var req keyspace.ControlRequest
			if err := json.Unmarshal([]byte(msg.Payload), &req); err != nil || req.Term != term {
				t.Errorf("request %q: want one for term %d (%v)", msg.Payload, term, err)
			}
			if n++; n == 2 {
				if err := master.Transfer(testCtx(t), ""); err != nil {
					t.Errorf("transfer on the second copy: %v", err)
				}
			}
			select {
			case <-copies:
			default:
			}
			copies <- n
		}
	}()
	res, err := StepDown(testCtx(t), reader(t, dial(t, herdtest.URL(inst), "again")), "", 5*time.Second)
	if err != nil || res.From != "a" || res.To != "b" {
		t.Fatalf("step-down: %+v, %v", res, err)
	}
	if n := <-copies; n < 2 {
		t.Errorf("%d copies of the request published, want at least 2", n)
	}
}

// TestClusterClientReloadsItsSlots: a Cluster URL gives a client that
// reloads the slot map every ClusterStateReloadInterval (a second), not
// go-redis's 60 s: a failed master sends no MOVED, and watch and status
// would follow a failover of herd's slot a minute late.
func TestClusterClientReloadsItsSlots(t *testing.T) {
	for _, url := range []string{"redis+cluster://127.0.0.1:1?addr=127.0.0.1:2", "redis://127.0.0.1:1?addr=127.0.0.1:2"} {
		c, topo, _, err := newClient(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		cc, ok := c.(*redis.ClusterClient)
		if !ok || topo != TopologyCluster {
			t.Fatalf("%s: a %T (%s), want a cluster client", url, c, topo)
		}
		if got := cc.Options().ClusterStateReloadInterval; got != time.Second {
			t.Errorf("%s: ClusterStateReloadInterval %v, want 1s", url, got)
		}
		_ = c.Close()
	}
}
