package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/internal/testkit/redistest"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the herd command and examples/node once per test binary.
func binaries(t *testing.T) (herdBin, nodeBin string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "herd-cli-test-"); buildErr != nil {
			return
		}
		for _, pkg := range []string{"github.com/herdkit/herd/cmd/herd", "github.com/herdkit/herd/examples/node"} {
			out, err := exec.Command("go", "build", "-o", binDir, pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "herd"), filepath.Join(binDir, "node")
}

func cleanupBinaries() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// proc is a running OS process whose output is collected.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan error
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			p.mu.Lock()
			p.out.WriteString(s.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		err := p.cmd.Wait()
		_ = pw.Close()
		p.done <- err
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), p.output())
		}
		p.done <- nil
	})
	return p
}

// stop sends sig and returns the exit status.
func (p *proc) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		return 0
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not end on %v", p.cmd.Path, sig)
		return -1
	}
}

func run(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// The herd binary against examples/node OS processes: status, a step-down,
// a crash (kill -9) seen by watch as an expiry and a failover, and watch
// ending on SIGINT with status 0.
func TestWithNodeProcesses(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	herdBin, nodeBin := binaries(t)
	url := herdtest.URL(inst)
	node := func(id string) *proc {
		return start(t, nodeBin, "-redis", url, "-id", id, "-lock", "shop", "-lock-ttl", "1500ms", "-every", "300ms")
	}
	nodes := map[string]*proc{"a": node("a")}
	herdtest.Eventually(t, 10*time.Second, "a master", func() bool { return strings.Contains(nodes["a"].output(), "MASTER") })
	nodes["b"], nodes["c"] = node("b"), node("c")
	common := []string{"-redis", url, "-lock", "shop", "-process-ttl", "2250ms"}
	herdtest.Eventually(t, 10*time.Second, "three processes", func() bool {
		_, out := run(t, herdBin, append(common, "processes", "-o", "json")...)
		var ps []map[string]any
		return json.Unmarshal([]byte(out), &ps) == nil && len(ps) == 3
	})
	code, out := run(t, herdBin, append(common, "status")...)
	if code != 0 || !strings.Contains(out, "master   a, term") || strings.Count(out, " slave ") != 2 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}

	watch := start(t, herdBin, append(common, "watch", "-interval", "200ms")...)
	herdtest.Eventually(t, 5*time.Second, "watch's state line", func() bool { return strings.Contains(watch.output(), "state") })

	code, out = run(t, herdBin, append(common, "step-down", "-to", "b")...)
	if code != 0 || !strings.HasPrefix(out, "b is master, term") {
		t.Fatalf("step-down -to b: exit %d: %s", code, out)
	}
	herdtest.Eventually(t, 5*time.Second, "the hand-over in watch", func() bool {
		return strings.Contains(watch.output(), "failover a → b in ")
	})

	// The master crashes: its lock expires, and a slave takes over.
	code, out = run(t, herdBin, append(common, "status", "-o", "json")...)
	var st struct {
		Master struct{ NodeID string } `json:"master"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Master.NodeID != "b" {
		t.Fatalf("status after the step-down: exit %d: %s", code, out)
	}
	if err := nodes["b"].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	herdtest.Eventually(t, 10*time.Second, "the expiry and the failover in watch", func() bool {
		o := watch.output()
		return strings.Contains(o, "the lock of b, term") && strings.Contains(o, "expired: no master") &&
			strings.Contains(o, "failover b → ")
	})
	if code := watch.stop(t, os.Interrupt); code != 0 {
		t.Fatalf("watch ended with %d on SIGINT", code)
	}
}
