package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testsync"
)

// Server is a redis-server process started by StartServer, listening on
// 127.0.0.1 without persistence. Close stops it.
type Server struct {
	// Addr is 127.0.0.1:<port>.
	Addr string
	// Name is the product and version from `--version`, like "redis-7.0.15".
	Name string

	cmd  *exec.Cmd
	dir  string
	out  *testsync.Buffer
	done chan struct{}
	once sync.Once
}

// StartServer starts the redis-server executable at path on a free
// loopback port, in a temporary directory, with no persistence, and returns
// once it answers PING. The process is killed if this process dies (Linux).
func StartServer(ctx context.Context, path string) (*Server, error) {
	name, err := versionOf(ctx, path)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		s, err := launch(ctx, path, name)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start %s: %w", path, lastErr)
}

func versionOf(ctx context.Context, path string) (string, error) {
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := exec.CommandContext(vctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", path, err, strings.TrimSpace(string(b)))
	}
	// "Redis server v=7.0.15 sha=..." -> "redis-7.0.15"
	f := strings.Fields(string(b))
	if len(f) >= 3 && f[1] == "server" && strings.HasPrefix(f[2], "v=") {
		return strings.ToLower(f[0]) + "-" + strings.TrimPrefix(f[2], "v="), nil
	}
	return strings.TrimSpace(string(b)), nil
}

func launch(ctx context.Context, path, name string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pick a port: %w", err)
	}
	dir, err := os.MkdirTemp("", "herdbench-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Name: name, dir: dir, out: &testsync.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--maxclients", "10000")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("%w; server output: %s", err, strings.TrimSpace(s.Output()))
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context) error {
	c := redis.NewClient(ClientOptions(s.Addr))
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("server exited during start")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server does not answer PING: %w", err)
		}
	}
}

// Output returns what the server wrote to stdout and stderr.
func (s *Server) Output() string {
	return s.out.String()
}

// Close kills the server, waits for it to exit and removes its directory.
// It may be called more than once.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			err = fmt.Errorf("redis-server (pid %d) did not exit after SIGKILL", s.cmd.Process.Pid)
		}
		if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
			err = rerr
		}
	})
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
