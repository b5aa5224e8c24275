package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/cmd/herd/internal/operate"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/testsync"
	"github.com/herdkit/herd/registry"
)

// herd runs the command in this process with the environment env.
func herd(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut testsync.Buffer
	code = Main(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

var (
	termRE     = regexp.MustCompile(`\b1[0-9]{12}\b`)
	durationRE = regexp.MustCompile(`\b[0-9]+(\.[0-9])?(ms|s)\b|\b[0-9]+m[0-9]{2}s\b`)
	portRE     = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)
	backendRE  = regexp.MustCompile(`backend (native|hpexpire|emulated)`)
	spacesRE   = regexp.MustCompile(` +`)
)

// normalize replaces what changes from run to run (terms, ages, ports, the
// backend) and collapses runs of spaces.
func normalize(s string) string {
	s = termRE.ReplaceAllString(s, "TERM")
	s = durationRE.ReplaceAllString(s, "AGE")
	s = portRE.ReplaceAllString(s, "127.0.0.1:PORT")
	s = backendRE.ReplaceAllString(s, "backend BACKEND")
	return spacesRE.ReplaceAllString(s, " ")
}

// status and processes against a herd on each server: the golden table, and
// the JSON with exactly the fields of the issue.
func TestStatusAndProcesses(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes := herdtest.Herd(t, inst, "orders", "a", "b", "c")
		nodes[1].SetMetadata(map[string]any{"zone": "eu-1", "weight": 3})
		env := map[string]string{"REDIS_URL": herdtest.URL(inst)}
		herdtest.Eventually(t, 5*time.Second, "b's metadata", func() bool {
			_, out, _ := herd(t, env, "-lock", "orders", "processes", "-role", "slave")
			return strings.Contains(out, "weight=3")
		})

		code, out, errOut := herd(t, env, "-lock", "orders", "status")
		if code != 0 || errOut != "" {
			t.Fatalf("status: exit %d, stderr %s", code, errOut)
		}
		golden(t, "status_redis.golden", normalize(out))

		code, out, _ = herd(t, env, "-lock", "orders", "processes", "-role", "slave")
		if code != 0 {
			t.Fatalf("processes: exit %d", code)
		}
		golden(t, "processes_slaves.golden", normalize(out))

		// Flags after the command work as well as before it.
		code, out, _ = herd(t, nil, "status", "-o", "json", "-redis", herdtest.URL(inst), "-lock", "orders")
		if code != 0 {
			t.Fatalf("status -o json: exit %d", code)
		}
		var st map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(slices.Sorted(mapsKeys(st)), ","); got != "backend,lock,master,processes,warnings" {
			t.Fatalf("status JSON members: %s", got)
		}
		var master map[string]any
		if err := json.Unmarshal(st["master"], &master); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(slices.Sorted(mapsKeys(master)), ","); got != "heldMs,identifier,nodeId,term,ttlMs" {
			t.Fatalf("master members: %s", got)
		}
		if master["nodeId"] != "a" || master["identifier"] != "svc-a" || int64(master["term"].(float64)) != nodes[0].Term() {
			t.Fatalf("master %v", master)
		}
		var procs []map[string]json.RawMessage
		if err := json.Unmarshal(st["processes"], &procs); err != nil {
			t.Fatal(err)
		}
		stored, err := nodes[0].Processes(context.Background())
		if err != nil || len(procs) != 3 || len(stored) != 3 {
			t.Fatalf("%d processes in the JSON, %d stored (%v)", len(procs), len(stored), err)
		}
		for i, p := range procs {
			// Each is the stored ProcessInfo JSON plus ageMs.
			want, _ := json.Marshal(stored[i])
			var wantMembers map[string]json.RawMessage
			_ = json.Unmarshal(want, &wantMembers)
			wantMembers["ageMs"] = nil
			if got, w := strings.Join(slices.Sorted(mapsKeys(p)), ","), strings.Join(slices.Sorted(mapsKeys(wantMembers)), ","); got != w {
				t.Errorf("process %d members %s, want %s", i, got, w)
			}
		}
		if string(st["warnings"]) != "[]" {
			t.Errorf("warnings %s", st["warnings"])
		}

		code, out, _ = herd(t, env, "-lock", "orders", "processes", "-o", "json", "-role", "master")
		var masters []registry.ProcessInfo
		if err := json.Unmarshal([]byte(out), &masters); code != 0 || err != nil || len(masters) != 1 || masters[0].ProcessID != "a" {
			t.Fatalf("processes -role master -o json: exit %d, %s", code, out)
		}
	})
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Every bad input has a clear message and its exit status.
func TestExitStatuses(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	herdtest.Admin(t, inst.Client(t), "ACL", "SETUSER", "reader", "on", ">pw", "-@all", "+ping", "+hello", "+auth")
	herdtest.Herd(t, inst, "orders", "a", "b")
	deaf := herdtest.Config("deaf", "x")
	deaf.IgnoreRemoteTransfers = true
	herdtest.Node(t, inst, deaf)
	url := herdtest.URL(inst)
	addr := inst.Options().Addr
	env := map[string]string{"REDIS_URL": url}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		says string
	}{
		{"help", env, []string{"-h"}, operate.ExitOK, ""},
		{"help command", env, []string{"help"}, operate.ExitOK, ""},
		{"command help", env, []string{"status", "-h"}, operate.ExitOK, "Usage: herd [global flags] status"},
		{"no command", env, nil, operate.ExitUsage, "no command given"},
		{"unknown command", env, []string{"stats"}, operate.ExitUsage, `unknown command "stats"`},
		{"unknown flag", env, []string{"status", "-x"}, operate.ExitUsage, "flag provided but not defined: -x"},
		{"unknown global flag", env, []string{"-x", "status"}, operate.ExitUsage, "flag provided but not defined: -x"},
		{"extra argument", env, []string{"status", "now"}, operate.ExitUsage, `unexpected argument "now"`},
		{"bad output", env, []string{"status", "-o", "yaml"}, operate.ExitUsage, `-o "yaml": want table or json`},
		{"bad watch output", env, []string{"watch", "-o", "table"}, operate.ExitUsage, `want text or json`},
		{"bad role", env, []string{"processes", "-role", "boss"}, operate.ExitUsage, `-role "boss": want master or slave`},
		{"bad interval", env, []string{"watch", "-interval", "0s"}, operate.ExitUsage, "-interval 0s must be positive"},
		{"bad timeout", env, []string{"step-down", "-timeout", "-1s"}, operate.ExitUsage, "must be positive"},
		{"bad duration", env, []string{"step-down", "-timeout", "soon"}, operate.ExitUsage, "invalid value"},
		{"bad process ttl", env, []string{"-process-ttl", "0s", "status"}, operate.ExitUsage, "-process-ttl 0s must be positive"},
		{"bad lock name", env, []string{"-lock", "a b", "status"}, operate.ExitUsage, "whitespace"},
		{"bad -to", env, []string{"-lock", "orders", "step-down", "-to", "b*"}, operate.ExitUsage, "glob character"},
		{"bad listen", env, []string{"-lock", "orders", "dashboard", "-listen", "nowhere"}, operate.ExitUsage, "-listen nowhere"},
		{"bad URL", nil, []string{"-redis", "redis://" + addr + "/db", "status"}, operate.ExitBadURL, "invalid database number"},
		{"bad URL from env", map[string]string{"REDIS_URL": "http://" + addr}, []string{"status"}, operate.ExitBadURL, "invalid URL scheme"},
		{"refused", nil, []string{"-redis", "redis://" + herdtest.ClosedPort(t), "status"}, operate.ExitUnreachable, "connection refused"},
		{"wrong password", nil, []string{"-redis", "redis://reader:nope@" + addr, "status"}, operate.ExitAuth, "check the user and password"},
		{"acl", nil, []string{"-redis", "redis://reader:pw@" + addr, "-lock", "orders", "status"}, operate.ExitACL, "NOPERM"},
		{"unknown lock", env, []string{"-lock", "order", "status"}, operate.ExitUnknownLock, "look like herd's: deaf, orders"},
		{"unknown lock, processes", env, []string{"-lock", "order", "processes"}, operate.ExitUnknownLock, "nothing is registered under it"},
		{"unknown lock, watch", env, []string{"-lock", "order", "watch"}, operate.ExitUnknownLock, "nothing is registered under it"},
		{"unknown lock, dashboard", env, []string{"-lock", "order", "dashboard", "-listen", "127.0.0.1:0"}, operate.ExitUnknownLock, "nothing is registered"},
		{"unknown lock, step-down", env, []string{"-lock", "order", "step-down"}, operate.ExitUnknownLock, "nothing is registered"},
		{"to nobody", env, []string{"-lock", "orders", "step-down", "-to", "zed"}, operate.ExitNotDelivered, "no live process of that id"},
		{"dead help", env, []string{"dead", "-h"}, operate.ExitOK, "dead list [-n N]"},
		{"dead command help", env, []string{"dead", "retry", "-h"}, operate.ExitOK, "Usage: herd [global flags] dead retry [-to PROCESS] ID..."},
		{"no dead command", env, []string{"dead"}, operate.ExitUsage, "no dead command given: list, retry or drop"},
		{"unknown dead command", env, []string{"dead", "show"}, operate.ExitUsage, `unknown dead command "show"`},
		{"bad dead output", env, []string{"dead", "list", "-o", "text"}, operate.ExitUsage, `herd dead list: usage: -o "text": want table or json`},
		{"bad dead count", env, []string{"dead", "list", "-n", "-1"}, operate.ExitUsage, "-n -1 must not be negative"},
		{"retry nothing", env, []string{"dead", "retry", "-to", "b"}, operate.ExitUsage, "give the ids of the dead letters to retry"},
		{"bad dead id", env, []string{"dead", "retry", "1767225600123-0", "latest"}, operate.ExitUsage, `"latest" is not a dead letter id`},
		{"bad retry -to", env, []string{"dead", "retry", "-to", "b*", "1-0"}, operate.ExitUsage, "glob character"},
		{"drop nothing", env, []string{"dead", "drop"}, operate.ExitUsage, "or -all to drop every one"},
		{"drop ids and all", env, []string{"dead", "drop", "1-0", "-all"}, operate.ExitUsage, "not both"},
		{"unknown lock, dead list", env, []string{"-lock", "order", "dead", "list"}, operate.ExitUnknownLock, "nothing is registered under it"},
		{"unknown lock, dead drop", env, []string{"dead", "-lock", "order", "drop", "-all"}, operate.ExitUnknownLock, "nothing is registered under it"},
		{"nobody listens", env, []string{"-lock", "deaf", "step-down"}, operate.ExitNotDelivered, "nobody listens on deaf:control"},
		{"unknown lock, assignments", env, []string{"-lock", "order", "assignments"}, operate.ExitUnknownLock, "look like herd's: deaf, orders"},
		{"unknown set", env, []string{"-lock", "orders", "assignments", "-set", "cams"}, operate.ExitUnknownLock,
			`unknown item set "cams": no item, no plan and no owner under orders:assign:cams:* on redis://` + addr + ` (-set names the set, assign.Config.Set); no item set of lock "orders" has items`},
		{"retry -to nobody", env, []string{"-lock", "orders", "dead", "retry", "-to", "nosuch", "1-0"}, operate.ExitError,
			`herd dead retry: -to nosuch: no live process of that id is registered under "orders" (herd processes lists them); nothing retried`},
		{"drop not found", env, []string{"-lock", "orders", "dead", "drop", "1-0"}, operate.ExitError,
			"herd dead drop: 1 of 1 dead letter not found in orders:dead: 1-0 (herd dead list shows the ids)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := herd(t, tc.env, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.says) {
				t.Fatalf("exit %d, want %d saying %q\nstdout: %s\nstderr: %s", code, tc.code, tc.says, out, errOut)
			}
			if code != 0 && !strings.Contains(errOut, "herd") {
				t.Fatalf("no message on stderr: %q", errOut)
			}
		})
	}
	// The help lists every exit status.
	_, out, _ := herd(t, env, "-h")
	for code := range 11 {
		if !strings.Contains(out, fmt.Sprintf("\n  %-3d ", code)) {
			t.Errorf("herd -h does not document exit status %d", code)
		}
	}
}

// step-down prints the new master; watch prints the hand-over and ends
// with status 0 when its context ends (Ctrl+C).
func TestStepDownAndWatch(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes := herdtest.Herd(t, inst, "orders", "a", "b", "c")
		env := map[string]string{"REDIS_URL": herdtest.URL(inst)}

		ctx, cancel := context.WithCancel(context.Background())
		var text, js testsync.Buffer
		done := make(chan int, 2)
		go func() {
			done <- Main(ctx, []string{"-lock", "orders", "watch", "-interval", "200ms"}, func(k string) string { return env[k] }, &text, &text)
		}()
		go func() {
			done <- Main(ctx, []string{"-lock", "orders", "watch", "-o", "json"}, func(k string) string { return env[k] }, &js, &js)
		}()
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("watch:\n%s\nwatch -o json:\n%s", text.String(), js.String())
			}
		})
		herdtest.Eventually(t, 5*time.Second, "the watches' first lines", func() bool {
			return strings.Contains(text.String(), "state") && strings.Contains(js.String(), `"event":"state"`)
		})

		code, out, errOut := herd(t, env, "-lock", "orders", "step-down", "-to", "c")
		if code != 0 || !regexp.MustCompile(`^c is master, term [0-9]+ \(was a, term [0-9]+\); took [0-9]+ms\n$`).MatchString(out) {
			t.Fatalf("step-down -to c: exit %d, %q %s", code, out, errOut)
		}
		herdtest.Eventually(t, 5*time.Second, "the first hand-over in the watches", func() bool {
			return strings.Contains(text.String(), "failover a → c") && strings.Contains(js.String(), `"event":"failover"`)
		})
		code, out, _ = herd(t, env, "-lock", "orders", "step-down", "-o", "json")
		var res operate.StepDownResult
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.From != "c" || res.To == "c" || res.Term <= res.FromTerm {
			t.Fatalf("step-down -o json: exit %d, %s", code, out)
		}
		herdtest.Eventually(t, 5*time.Second, "the hand-overs in the watch", func() bool {
			return len(regexp.MustCompile(`\.\d{3}  failover `).FindAllString(text.String(), -1)) == 2 && strings.Count(js.String(), `"event":"failover"`) == 2
		})
		cancel()
		for range 2 {
			if code := <-done; code != 0 {
				t.Errorf("watch ended with exit %d", code)
			}
		}
		lines := strings.Split(strings.TrimSpace(text.String()), "\n")
		line := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}  [a-z-]+ +\S.*$`)
		for _, l := range lines {
			if !line.MatchString(l) {
				t.Errorf("watch line %q", l)
			}
		}
		if !strings.Contains(text.String(), "a released the lock, term") || !strings.Contains(text.String(), "handing over to c") ||
			!strings.Contains(text.String(), "failover a → c in ") {
			t.Errorf("watch output:\n%s", text.String())
		}
		for _, l := range strings.Split(strings.TrimSpace(js.String()), "\n") {
			var e map[string]any
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("watch -o json line %q: %v", l, err)
			}
			if e["event"] == "failover" {
				if _, ok := e["gapMs"]; !ok || e["from"] == nil || e["fromTerm"] == nil || e["term"] == nil || e["nodeId"] == nil {
					t.Errorf("failover line %s", l)
				}
			}
			if _, err := time.Parse(time.RFC3339, e["time"].(string)); err != nil {
				t.Errorf("time of %s: %v", l, err)
			}
		}
		_ = nodes
	})
}
