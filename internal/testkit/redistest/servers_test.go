package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeTB records what a helper does to its test: Fatal and Skip end the
// calling goroutine as the real ones do, and Cleanup functions are kept
// for the test to run. Everything else goes to the real test.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	fatal    []string
	errs     []string
	skipped  []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *fakeTB) record(dst *[]string, msg string, exit bool) {
	f.mu.Lock()
	*dst = append(*dst, msg)
	f.mu.Unlock()
	if exit {
		runtime.Goexit()
	}
}

func (f *fakeTB) Fatal(args ...any)            { f.record(&f.fatal, fmt.Sprint(args...), true) }
func (f *fakeTB) Fatalf(s string, args ...any) { f.record(&f.fatal, fmt.Sprintf(s, args...), true) }
func (f *fakeTB) Error(args ...any)            { f.record(&f.errs, fmt.Sprint(args...), false) }
func (f *fakeTB) Errorf(s string, args ...any) { f.record(&f.errs, fmt.Sprintf(s, args...), false) }
func (f *fakeTB) Skip(args ...any)             { f.record(&f.skipped, fmt.Sprint(args...), true) }
func (f *fakeTB) Skipf(s string, args ...any)  { f.record(&f.skipped, fmt.Sprintf(s, args...), true) }
func (f *fakeTB) Logf(string, ...any)          {}
func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.fatal)+len(f.errs) > 0
}

// run calls fn with f on a goroutine of its own (so Fatal and Skip can end
// it) and waits for it; then it runs the recorded cleanups, last first.
func (f *fakeTB) run(fn func(tb testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	cl := f.cleanups
	f.cleanups = nil
	f.mu.Unlock()
	for i := len(cl) - 1; i >= 0; i-- {
		cl[i]()
	}
}

// writeScript writes an executable shell script named name into dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

type serversCase struct {
	name      string
	path      string // PATH; "" hides redis-server
	servers   string // HERD_REDIS_SERVERS
	require   string // HERD_REQUIRE_REDIS
	wantNames []string
	wantSkip  string
	wantFatal string
}

func TestServers(t *testing.T) {
	dir := t.TempDir()
	fakeValkey := writeScript(t, dir, "fake-valkey", `echo "Valkey server v=1.2.3 sha=0 malloc=libc bits=64 build=0"`)
	fakeOdd := writeScript(t, dir, "odd-server", `echo "something else"`)
	broken := writeScript(t, dir, "broken-server", `echo "cannot run" >&2; exit 3`)
	notExec := filepath.Join(dir, "plain-file")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pathRedis, _ := exec.LookPath("redis-server")

	tests := []serversCase{
		{name: "none skips", wantSkip: "no Redis server found"},
		{name: "none with require fails", require: "1", wantFatal: "HERD_REQUIRE_REDIS=1"},
		{name: "require 0 still skips", require: "0", wantSkip: "no Redis server found"},
		{name: "listed server", servers: fakeValkey, wantNames: []string{"valkey-1.2.3"}},
		{name: "empty entries ignored", servers: ":" + fakeValkey + "::", wantNames: []string{"valkey-1.2.3"}},
		{name: "same name listed twice", servers: fakeValkey + ":" + fakeValkey, wantNames: []string{"valkey-1.2.3"}},
		{name: "unknown version format", servers: fakeOdd, wantNames: []string{"odd-server"}},
		{name: "missing path", servers: filepath.Join(dir, "nope"), wantFatal: "nope"},
		{name: "directory", servers: dir, wantFatal: "not an executable file"},
		{name: "not executable", servers: notExec, wantFatal: "not an executable file"},
		{name: "version fails", servers: broken, wantFatal: "cannot run"},
	}
	if pathRedis != "" {
		name, err := serverName(pathRedis)
		if err != nil {
			t.Fatal(err)
		}
		tests = append(tests,
			serversCase{name: "PATH first then list", path: filepath.Dir(pathRedis), servers: fakeValkey, wantNames: []string{name, "valkey-1.2.3"}},
			serversCase{name: "PATH server listed again", path: filepath.Dir(pathRedis), servers: pathRedis, wantNames: []string{name}},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = t.TempDir() // an empty directory: no redis-server on PATH
			}
			t.Setenv("PATH", path)
			t.Setenv(EnvServers, tt.servers)
			t.Setenv(EnvRequire, tt.require)
			f := &fakeTB{TB: t}
			var got []Server
			f.run(func(tb testing.TB) { got = Servers(tb) })

			checkOne(t, "skip", f.skipped, tt.wantSkip)
			checkOne(t, "fatal", f.fatal, tt.wantFatal)
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
				if !filepath.IsAbs(s.Path) {
					t.Errorf("server %s: path %q is not absolute", s.Name, s.Path)
				}
			}
			if strings.Join(names, ",") != strings.Join(tt.wantNames, ",") {
				t.Fatalf("names = %v, want %v", names, tt.wantNames)
			}
		})
	}
}

// checkOne checks that msgs holds one message containing want, or none if
// want is empty.
func checkOne(t *testing.T, kind string, msgs []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(msgs) > 0:
		t.Fatalf("unexpected %s: %q", kind, msgs)
	case want != "" && (len(msgs) != 1 || !strings.Contains(msgs[0], want)):
		t.Fatalf("%s = %q, want one containing %q", kind, msgs, want)
	}
}
