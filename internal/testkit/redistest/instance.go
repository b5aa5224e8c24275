package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// Bounds on waiting for a server. They are generous because the machine
// running the tests may be busy (-race, parallel packages); they bound a
// failure, they are never asserted. (redisproc.ReadyTimeout bounds a start.)
const (
	exitTimeout  = 10 * time.Second // from SIGKILL or SHUTDOWN to the process reaped
	startTries   = 5                // fresh ports tried by Start when a port is taken
	restartTries = 20               // binds of the same port tried by Restart
	outputLimit  = 64 << 10         // bytes of server output kept
)

// Instance is one running (or stopped) server process started by Start.
// Server, Addr, Port and Dir never change, not even across Restart.
// Its methods are safe for concurrent use; the control methods are
// serialised with each other.
type Instance struct {
	// Server is the executable this instance runs.
	Server Server
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port on 127.0.0.1 the server listens on.
	Port int
	// Dir is the server's working directory (--dir), removed after the test.
	Dir string

	extraArgs []string
	log       *redisproc.TailBuffer // output of every process of this instance

	mu     sync.Mutex // serialises control methods; guards the fields below
	cur    *proc      // the latest process, running or exited; nil before the first launch
	paused bool       // cur was sent SIGSTOP and not SIGCONT since
}

// proc is one server process. Whoever replaces or drops a proc kills it
// first and waits until it is reaped, so the goroutine redisproc keeps
// waiting for it never outlives its Instance's cleanup.
type proc struct {
	*redisproc.Proc
	expected atomic.Bool // set once the test asked the process to exit
}

// Start starts s on 127.0.0.1 on a free port, in a temporary directory of
// its own, without persistence, and returns once it answers. extraArgs are
// appended to the command line after redistest's own arguments (so they
// win for single-valued settings; do not override --port, --bind or --dir).
//
// A t.Cleanup registered by Start kills and reaps the process. If the
// server cannot be started the test fails with the server's output.
func Start(t testing.TB, s Server, extraArgs ...string) *Instance {
	t.Helper()
	extra := append([]string(nil), extraArgs...)
	return startWithArgs(t, s, func() ([]string, error) { return extra, nil })
}

// startWithArgs is Start with extra arguments chosen afresh before each
// try, so that a server needing more ports (a cluster node's bus port, a
// TLS port) replaces a second port that was taken along with the first.
// Restart reuses the last arguments.
func startWithArgs(t testing.TB, s Server, args func() ([]string, error)) *Instance {
	t.Helper()
	return startEach(t, s, s.Name, func(inst *Instance, port int) (*proc, error) {
		extra, err := args()
		if err != nil {
			return nil, fmt.Errorf("pick ports: %w", err)
		}
		inst.extraArgs = extra
		return inst.launch(port)
	})
}

// startEach makes an Instance of s and starts it with launch on a free
// port, trying again on another port when the chosen one turns out taken.
// what names the process in failures ("redis-7.0.15", "a sentinel of
// redis-7.0.15").
func startEach(t testing.TB, s Server, what string, launch func(inst *Instance, port int) (*proc, error)) *Instance {
	t.Helper()
	inst := &Instance{
		Server: s,
		Dir:    t.TempDir(),
		log:    &redisproc.TailBuffer{Limit: outputLimit},
	}
	t.Cleanup(func() { inst.cleanup(t) })
	var lastErr error
	for range startTries {
		port, err := redisproc.FreePort()
		if err != nil {
			t.Fatalf("redistest: pick a port for %s: %v", what, err)
		}
		p, err := launch(inst, port)
		if errors.Is(err, redisproc.ErrPortInUse) {
			lastErr = err
			continue
		}
		if err != nil {
			t.Fatalf("redistest: start %s: %v\n--- server output ---\n%s", what, err, inst.log)
		}
		inst.Port, inst.Addr = port, redisproc.Addr(port)
		inst.mu.Lock()
		inst.cur = p
		inst.mu.Unlock()
		return inst
	}
	t.Fatalf("redistest: start %s: %d port choices in a row were taken: %v\n--- server output ---\n%s",
		what, startTries, lastErr, inst.log)
	return nil
}

// Restart kills the server with SIGKILL (if it is running) and starts it
// again on the same port with empty data: the contents of Dir are removed
// in between. Clients reconnect on their own (go-redis retries a command
// once its pooled connection turns out to be broken).
func (i *Instance) Restart(t testing.TB) {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cur != nil {
		if err := i.killLocked(); err != nil {
			t.Fatalf("redistest: restart %s: %v", i.Server.Name, err)
		}
	}
	if err := clearDir(i.Dir); err != nil {
		t.Fatalf("redistest: restart %s: %v", i.Server.Name, err)
	}
	var err error
	for try := 1; try <= restartTries; try++ {
		var p *proc
		p, err = i.launch(i.Port)
		if err == nil {
			i.cur = p
			return
		}
		if !errors.Is(err, redisproc.ErrPortInUse) {
			break
		}
		time.Sleep(100 * time.Millisecond) // someone holds our port; give it a moment
	}
	t.Fatalf("redistest: restart %s on port %d: %v\n--- server output ---\n%s", i.Server.Name, i.Port, err, i.log)
}

// Kill sends SIGKILL to the server (even when paused) and waits until it is
// reaped. It does nothing if the server is not running; on a server that
// exited on its own it acknowledges the exit, which the cleanup would
// otherwise report as a test failure.
func (i *Instance) Kill(t testing.TB) {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.killLocked(); err != nil {
		t.Fatalf("redistest: kill %s: %v", i.Server.Name, err)
	}
}

// Stop shuts the server down gracefully with SHUTDOWN NOSAVE (resuming it
// first if paused) and waits until it exits. It does nothing if the server
// is not running.
func (i *Instance) Stop(t testing.TB) {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	p := i.cur
	if p == nil || p.Exited() {
		return
	}
	if i.paused {
		if err := p.Signal(syscall.SIGCONT); err != nil {
			t.Fatalf("redistest: stop %s: resume: %v", i.Server.Name, err)
		}
		i.paused = false
	}
	p.expected.Store(true)
	c := redis.NewClient(i.adminOptions())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), exitTimeout)
	defer cancel()
	// SHUTDOWN answers only on failure; on success the connection drops.
	err := c.Do(ctx, "SHUTDOWN", "NOSAVE").Err()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		_ = i.killLocked()
		t.Fatalf("redistest: stop %s: SHUTDOWN NOSAVE: %v", i.Server.Name, err)
	}
	select {
	case <-p.Done():
	case <-time.After(exitTimeout):
		_ = i.killLocked()
		t.Fatalf("redistest: stop %s: still running %v after SHUTDOWN NOSAVE (killed)", i.Server.Name, exitTimeout)
	}
}

// Pause freezes the server with SIGSTOP: it keeps its connections open but
// answers nothing, like a stalled host. It returns once the kernel reports
// the process stopped (on Linux). Resume undoes it; cleanup kills a paused
// server fine.
func (i *Instance) Pause(t testing.TB) {
	t.Helper()
	i.signal(t, "pause", syscall.SIGSTOP, true)
}

// Resume continues a server frozen by Pause, with SIGCONT.
func (i *Instance) Resume(t testing.TB) {
	t.Helper()
	i.signal(t, "resume", syscall.SIGCONT, false)
}

func (i *Instance) signal(t testing.TB, what string, sig syscall.Signal, stop bool) {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	p := i.cur
	if p == nil || p.Exited() {
		t.Fatalf("redistest: %s %s: server is not running", what, i.Server.Name)
	}
	if err := p.Signal(sig); err != nil {
		t.Fatalf("redistest: %s %s: %v", what, i.Server.Name, err)
	}
	if err := waitStopped(p.Pid(), stop, exitTimeout); err != nil {
		t.Fatalf("redistest: %s %s: %v", what, i.Server.Name, err)
	}
	i.paused = stop
}

// Pid returns the process id of the running server, or 0 if it is not running.
func (i *Instance) Pid() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cur == nil || i.cur.Exited() {
		return 0
	}
	return i.cur.Pid()
}

// Output returns the last 64 KiB of what the instance's processes wrote to
// stdout and stderr, each start marked by a line of its own.
func (i *Instance) Output() string { return i.log.String() }

// Info returns the reply of INFO <section> ("" for the default sections).
// It fails the test if the server does not answer.
func (i *Instance) Info(t testing.TB, section string) string {
	t.Helper()
	c := redis.NewClient(i.adminOptions())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := []any{"INFO"}
	if section != "" {
		args = append(args, section)
	}
	s, err := c.Do(ctx, args...).Text()
	if err != nil {
		t.Fatalf("redistest: INFO %s on %s: %v", section, i.Server.Name, err)
	}
	return s
}

// InfoField returns the value of field in an INFO reply, such as
// InfoField(info, "redis_version").
func InfoField(info, field string) (string, bool) { return redisproc.InfoField(info, field) }

// Options returns fresh client options for the instance, for callers that
// build their own client (redis.NewClient, redis.NewUniversalClient, ...):
// ContextTimeoutEnabled, 2 s dial/read/write timeouts, 3 s pool timeout,
// go-redis's default 3 retries (so a client survives Restart), no CLIENT
// SETINFO and no maintenance notifications (not every server has them).
// The caller owns and closes the client.
func (i *Instance) Options() *redis.Options {
	return clientOptions(i.Addr)
}

// clientOptions are the options of every client of one server redistest
// makes.
func clientOptions(addr string) *redis.Options { return universalOptions(addr).Simple() }

// universalOptions are the settings of every client redistest makes, for
// Simple, Cluster or Failover (FailoverOptions has no maintenance
// notifications to turn off).
func universalOptions(addrs ...string) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		PoolTimeout:           3 * time.Second,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
}

// Client returns a new client of the instance built from Options, closed
// by a t.Cleanup.
func (i *Instance) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(i.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// adminOptions are Options without retries, for one-shot control commands.
func (i *Instance) adminOptions() *redis.Options {
	o := i.Options()
	o.MaxRetries = -1
	o.PoolSize = 1
	return o
}

// launch starts a process on port and waits until it answers as itself.
// On error the process has been killed and reaped.
func (i *Instance) launch(port int) (*proc, error) {
	args := append(redisproc.Args(port, i.Dir), "--enable-debug-command", "local")
	args = append(args, i.extraArgs...)
	return i.spawn(args, i.Server.Name, port)
}

// spawn runs the server's executable with args in i.Dir, its output into
// i.log after a line naming what and port, and waits until the process
// answers on port as itself. On error the process has been killed and
// reaped.
func (i *Instance) spawn(args []string, what string, port int) (*proc, error) {
	fmt.Fprintf(i.log, "--- redistest: %s on %s ---\n", what, redisproc.Addr(port))
	p, err := redisproc.Spawn(context.Background(), i.Server.Path, i.Dir, args, port, i.log)
	if err != nil {
		return nil, err
	}
	return &proc{Proc: p}, nil
}

// killLocked kills the current process, if running, and waits until it is
// reaped. i.mu must be held.
func (i *Instance) killLocked() error {
	p := i.cur
	i.paused = false
	if p == nil {
		return nil
	}
	p.expected.Store(true)
	return p.Kill(exitTimeout)
}

// cleanup kills the instance at the end of the test that started it, and
// prints the server output when the server died on its own or the test failed.
func (i *Instance) cleanup(t testing.TB) {
	i.mu.Lock()
	defer i.mu.Unlock()
	unexpected := i.cur != nil && i.cur.Exited() && !i.cur.expected.Load()
	if err := i.killLocked(); err != nil {
		t.Errorf("redistest: cleanup %s: %v", i.Server.Name, err)
	}
	switch {
	case unexpected:
		t.Errorf("redistest: %s on %s exited on its own: %v\n--- server output ---\n%s",
			i.Server.Name, i.Addr, i.cur.Err(), i.log)
	case t.Failed():
		t.Logf("redistest: %s on %s output:\n%s", i.Server.Name, i.Addr, i.log)
	}
}

// clearDir removes everything inside dir, keeping dir itself.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clear %s: %w", dir, err)
		}
	}
	return nil
}
