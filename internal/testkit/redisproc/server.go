package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Bounds on starting and stopping a Server.
const (
	startTries  = 5                // fresh ports tried when the chosen one is taken
	exitTimeout = 10 * time.Second // from SIGKILL to the process reaped
)

// Server is a server process started by Start for a program that is not a
// test: on a free port of 127.0.0.1, in a temporary directory of its own,
// without persistence. Close stops it and removes the directory.
type Server struct {
	// Addr is "127.0.0.1:<port>".
	Addr string
	// Name is the product and version from `--version`, like
	// "redis-7.0.15" (see Version).
	Name string

	proc *Proc
	dir  string
	out  *TailBuffer
	once sync.Once
	err  error // of Close
}

// Start starts the server executable at path (a file name is looked up in
// PATH) with Args and then extraArgs, and returns once it answers as
// itself. A port taken between its choice and the bind is replaced by
// another, up to five times. On error nothing is left running or on disk,
// and the error carries the server's output.
func Start(ctx context.Context, path string, extraArgs ...string) (*Server, error) {
	name, err := Version(ctx, path)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redisproc-")
	if err != nil {
		return nil, err
	}
	s := &Server{Name: name, dir: dir, out: &TailBuffer{Limit: 64 << 10}}
	for range startTries {
		port, err := FreePort()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start %s: pick a port: %w", path, err)
		}
		s.proc, err = Spawn(ctx, path, dir, append(Args(port, dir), extraArgs...), port, s.out)
		if errors.Is(err, ErrPortInUse) {
			continue
		}
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start %s: %w; server output: %s", path, err, strings.TrimSpace(s.out.String()))
		}
		s.Addr = Addr(port)
		return s, nil
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("start %s: %d ports in a row were taken", path, startTries)
}

// Output returns the last 64 KiB the server wrote to stdout and stderr.
func (s *Server) Output() string { return s.out.String() }

// Close kills the server, waits for it to exit and removes its directory.
// It may be called more than once; every call returns the first's error.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.err = s.proc.Kill(exitTimeout)
		if err := os.RemoveAll(s.dir); err != nil && s.err == nil {
			s.err = err
		}
	})
	return s.err
}

// versionRE matches the first line of `redis-server --version`, e.g.
// "Redis server v=7.0.15 sha=..." or "Valkey server v=9.1.2 sha=...".
var versionRE = regexp.MustCompile(`^(\S+) server v=(\S+)`)

// Version runs `<path> --version` and names the server by its product and
// version, lower case: "redis-7.0.15", "valkey-9.1.2". Output of another
// form names it by its file name instead.
func Version(ctx context.Context, path string) (string, error) {
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := exec.CommandContext(vctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("run %s --version: %w: %s", path, err, strings.TrimSpace(string(b)))
	}
	if name, ok := ParseVersion(string(b)); ok {
		return name, nil
	}
	return filepath.Base(path), nil
}

// ParseVersion turns "Redis server v=7.0.15 sha=..." into "redis-7.0.15";
// false when out is of another form.
func ParseVersion(out string) (string, bool) {
	m := versionRE.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return "", false
	}
	return strings.ToLower(m[1]) + "-" + m[2], true
}
