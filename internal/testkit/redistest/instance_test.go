package redistest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// ctxT returns a context bounded well above any healthy round trip, so a
// hung server fails the test instead of hanging it.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// shortCtx returns a context for calls expected to fail (dead or paused
// server), so the test does not wait through go-redis's retries.
func shortCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

func TestStartClientInfo(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		inst := Start(t, s)
		ctx := ctxT(t)
		if inst.Addr != "127.0.0.1:"+strconv.Itoa(inst.Port) {
			t.Fatalf("Addr = %q, Port = %d", inst.Addr, inst.Port)
		}
		c := inst.Client(t)
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("GET k = %q, %v", got, err)
		}

		info := inst.Info(t, "server")
		if pid, _ := InfoField(info, "process_id"); pid != strconv.Itoa(inst.Pid()) {
			t.Fatalf("process_id = %s, Pid() = %d", pid, inst.Pid())
		}
		if port, _ := InfoField(info, "tcp_port"); port != strconv.Itoa(inst.Port) {
			t.Fatalf("tcp_port = %s, want %d", port, inst.Port)
		}

		// No persistence, and the server's files live in Dir.
		cfg, err := c.ConfigGet(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{"save": "", "appendonly": "no", "dir": inst.Dir, "bind": "127.0.0.1"} {
			if cfg[k] != want {
				t.Errorf("CONFIG %s = %q, want %q", k, cfg[k], want)
			}
		}

		// Options gives an independent client with a context-aware timeout.
		o := inst.Options()
		if !o.ContextTimeoutEnabled || o.Addr != inst.Addr {
			t.Fatalf("Options = %+v", o)
		}
		c2 := redis.NewClient(o)
		defer c2.Close()
		if got, err := c2.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("second client: GET k = %q, %v", got, err)
		}
	})
}

func TestExtraArgs(t *testing.T) {
	inst := Start(t, Default(t), "--maxmemory", "10mb", "--notify-keyspace-events", "KEA")
	cfg, err := inst.Client(t).ConfigGet(ctxT(t), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["maxmemory"] != strconv.Itoa(10<<20) {
		t.Errorf("maxmemory = %q, want %d", cfg["maxmemory"], 10<<20)
	}
	if got := cfg["notify-keyspace-events"]; !strings.ContainsAny(got, "AK") {
		t.Errorf("notify-keyspace-events = %q, want the KEA set", got)
	}
}

func TestTwoInstancesAreIndependent(t *testing.T) {
	s := Default(t)
	a, b := Start(t, s), Start(t, s)
	if a.Port == b.Port || a.Dir == b.Dir {
		t.Fatalf("shared port or dir: %d/%d %s/%s", a.Port, b.Port, a.Dir, b.Dir)
	}
	ctx := ctxT(t)
	if err := a.Client(t).Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client(t).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k on b: %v, want redis.Nil", err)
	}
}

func TestRestart(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		inst := Start(t, s)
		ctx := ctxT(t)
		c := inst.Client(t)
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		port, pid := inst.Port, inst.Pid()

		inst.Restart(t)
		if inst.Port != port {
			t.Fatalf("port changed across Restart: %d -> %d", port, inst.Port)
		}
		if inst.Pid() == pid || alive(pid) {
			t.Fatalf("old process %d still there (new pid %d)", pid, inst.Pid())
		}
		// The same client reconnects, and the data is gone.
		if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET k after Restart: %v, want redis.Nil", err)
		}
	})
}

func TestStopKillRestart(t *testing.T) {
	inst := Start(t, Default(t))
	ctx := ctxT(t)
	c := inst.Client(t)
	tests := []struct {
		name string
		down func(testing.TB)
	}{
		{"stop", inst.Stop},
		{"kill", inst.Kill},
		{"stop while paused", func(tb testing.TB) { inst.Pause(tb); inst.Stop(tb) }},
		{"kill while paused", func(tb testing.TB) { inst.Pause(tb); inst.Kill(tb) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := inst.Pid()
			if pid == 0 {
				t.Fatal("server not running at the start")
			}
			tt.down(t)
			if inst.Pid() != 0 || alive(pid) {
				t.Fatalf("pid %d still running", pid)
			}
			if err := c.Ping(shortCtx(t)).Err(); err == nil {
				t.Fatal("PING answered by a stopped server")
			}
			// Both are no-ops once the server is down.
			inst.Stop(t)
			inst.Kill(t)

			inst.Restart(t)
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING after Restart: %v", err)
			}
		})
	}
}

func TestPauseResume(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		inst := Start(t, s)
		c := inst.Client(t)
		if err := c.Ping(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}

		inst.Pause(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("PING on a paused server: %v, want context.DeadlineExceeded", err)
		}
		if !alive(inst.Pid()) {
			t.Fatal("paused server is gone")
		}

		inst.Resume(t)
		if err := c.Ping(ctxT(t)).Err(); err != nil {
			t.Fatalf("PING after Resume: %v", err)
		}
	})
}

func TestPauseNotRunning(t *testing.T) {
	inst := Start(t, Default(t))
	inst.Kill(t)
	f := &fakeTB{TB: t}
	f.run(func(tb testing.TB) { inst.Pause(tb) })
	checkOne(t, "fatal", f.fatal, "not running")
}

func TestLaunchPortInUse(t *testing.T) {
	s := Default(t)
	tests := []struct {
		name   string
		holder func(t *testing.T) int // occupies a port and returns it
	}{
		{"plain listener", func(t *testing.T) int {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l.Addr().(*net.TCPAddr).Port
		}},
		// Another server answers PING on the port: launch must notice the
		// answer is not from its own process.
		{"another server", func(t *testing.T) int { return Start(t, s).Port }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := tt.holder(t)
			inst := &Instance{Server: s, Dir: t.TempDir(), log: &redisproc.TailBuffer{Limit: outputLimit}}
			p, err := inst.launch(port)
			if !errors.Is(err, redisproc.ErrPortInUse) {
				if p != nil {
					_ = p.Kill(exitTimeout)
				}
				t.Fatalf("launch on a taken port: %v, want redisproc.ErrPortInUse", err)
			}
			if !strings.Contains(inst.Output(), "Address already in use") {
				t.Fatalf("output lacks the bind error:\n%s", inst.Output())
			}
		})
	}
}

func TestStartBadArgsReportsOutput(t *testing.T) {
	f := &fakeTB{TB: t}
	f.run(func(tb testing.TB) { Start(tb, Default(t), "--no-such-directive", "1") })
	// The failure names the server and carries its own complaint.
	checkOne(t, "fatal", f.fatal, "--- server output ---")
	if !strings.Contains(strings.ToLower(f.fatal[0]), "no-such-directive") {
		t.Fatalf("fatal lacks the server's complaint: %s", f.fatal[0])
	}
}

func TestCleanupAfterFatal(t *testing.T) {
	var pid int
	f := &fakeTB{TB: t}
	f.run(func(tb testing.TB) {
		inst := Start(tb, Default(t))
		inst.Pause(tb) // even a stopped process must go
		pid = inst.Pid()
		tb.Fatal("test gives up")
	})
	checkOne(t, "fatal", f.fatal, "test gives up")
	if pid == 0 || alive(pid) {
		t.Fatalf("pid %d left behind after the cleanup", pid)
	}
	if len(f.errs) != 0 {
		t.Fatalf("cleanup errors: %q", f.errs)
	}
}

func TestCleanupReportsUnexpectedExit(t *testing.T) {
	f := &fakeTB{TB: t}
	f.run(func(tb testing.TB) {
		inst := Start(tb, Default(t))
		if err := syscall.Kill(inst.Pid(), syscall.SIGKILL); err != nil {
			tb.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for inst.Pid() != 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	})
	checkOne(t, "error", f.errs, "exited on its own")
	if !strings.Contains(f.errs[0], "--- server output ---") || !strings.Contains(f.errs[0], "--- redistest: ") {
		t.Fatalf("error lacks the server output: %s", f.errs[0])
	}

	// Kill acknowledges a server that died: no error then.
	f = &fakeTB{TB: t}
	f.run(func(tb testing.TB) {
		inst := Start(tb, Default(t))
		if err := syscall.Kill(inst.Pid(), syscall.SIGKILL); err != nil {
			tb.Fatal(err)
		}
		inst.Kill(tb)
	})
	if len(f.errs)+len(f.fatal) != 0 {
		t.Fatalf("errors after an acknowledged exit: %q %q", f.errs, f.fatal)
	}
}
