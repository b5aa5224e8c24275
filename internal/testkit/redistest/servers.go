package redistest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// Environment variables read by Servers.
const (
	// EnvServers lists extra server executables, separated by colons.
	EnvServers = "HERD_REDIS_SERVERS"
	// EnvRequire, when "1", turns "no server found" from a skip into a failure.
	EnvRequire = "HERD_REQUIRE_REDIS"
)

// Server is one Redis-compatible server executable of the test matrix.
type Server struct {
	// Name is the product and version from `<Path> --version`, lower case,
	// such as "redis-7.0.15" or "valkey-9.1.2". It names the subtest in
	// ForEachServer and is unique within the matrix.
	Name string
	// Path is the absolute path of the executable.
	Path string
}

// String returns the server's name.
func (s Server) String() string { return s.Name }

// nameCache maps an executable's absolute path to its Name, so that
// `--version` runs once per executable per test binary.
var nameCache sync.Map // string -> string

// Servers returns the server matrix: `redis-server` from PATH (when present)
// followed by each executable in HERD_REDIS_SERVERS, in order, without two
// entries of the same Name.
//
// A path listed in HERD_REDIS_SERVERS that does not exist, is not an
// executable file, or does not answer `--version` fails the test. When the
// matrix is empty the test is skipped, or fails if HERD_REQUIRE_REDIS=1.
func Servers(t testing.TB) []Server {
	t.Helper()
	var paths []string
	if p, err := exec.LookPath("redis-server"); err == nil {
		paths = append(paths, p)
	}
	for _, p := range strings.Split(os.Getenv(EnvServers), ":") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			t.Fatalf("redistest: %s lists %q: %v", EnvServers, p, err)
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			t.Fatalf("redistest: %s lists %q, which is not an executable file", EnvServers, p)
		}
		paths = append(paths, p)
	}

	var out []Server
	seen := map[string]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatalf("redistest: resolve %q: %v", p, err)
		}
		name, err := serverName(abs)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, Server{Name: name, Path: abs})
	}
	if len(out) == 0 {
		msg := "redistest: no Redis server found: install redis-server (e.g. apt-get install redis-server) " +
			"or list server executables in " + EnvServers + " (colon-separated)"
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(msg + " [" + EnvRequire + "=1]")
		}
		t.Skip(msg)
	}
	return out
}

// Default returns the first server of the matrix: `redis-server` from PATH
// when present. It skips or fails the test as Servers does.
func Default(t testing.TB) Server {
	t.Helper()
	return Servers(t)[0]
}

// ForEachServer runs fn as a subtest of t for each server of the matrix,
// named after Server.Name, so `go test -run 'TestX/valkey'` selects one.
// Subtests run sequentially unless fn calls t.Parallel.
func ForEachServer(t *testing.T, fn func(t *testing.T, s Server)) {
	t.Helper()
	for _, s := range Servers(t) {
		t.Run(s.Name, func(t *testing.T) { fn(t, s) })
	}
}

// serverName names the executable at path by its `--version` output
// (redisproc.Version), once per executable per test binary.
func serverName(path string) (string, error) {
	if v, ok := nameCache.Load(path); ok {
		return v.(string), nil
	}
	name, err := redisproc.Version(context.Background(), path)
	if err != nil {
		return "", err
	}
	nameCache.Store(path, name)
	return name, nil
}
