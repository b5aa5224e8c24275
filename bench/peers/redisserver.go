package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process started by startRedis on a free
// loopback port, in a temporary directory, without persistence.
type redisServer struct {
	addr string // 127.0.0.1:<port>
	name string // product and version, "redis-7.0.15"

	cmd  *exec.Cmd
	dir  string
	out  bytes.Buffer // guarded by mu
	mu   sync.Mutex
	done chan struct{}
	once sync.Once
}

// startRedis starts the redis-server executable at path and returns once
// it answers PING. The kernel kills the server if this process dies.
func startRedis(ctx context.Context, path string) (*redisServer, error) {
	var lastErr error
	for range 5 { // a port picked free can be taken before the server binds it
		s, err := launchRedis(ctx, path)
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

func launchRedis(ctx context.Context, path string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pick a port: %w", err)
	}
	dir, err := os.MkdirTemp("", "herdpeers-redis-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	s.cmd = exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no")
	s.cmd.Stdout, s.cmd.Stderr = s, s
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	c := redis.NewClient(redisOptions(s.addr))
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = c.Ping(pctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case <-s.done:
			_ = s.close()
			return nil, fmt.Errorf("server exited during start: %s", strings.TrimSpace(s.output()))
		case <-ctx.Done():
			_ = s.close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.close()
			return nil, fmt.Errorf("server does not answer PING: %w", err)
		}
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		_ = s.close()
		return nil, fmt.Errorf("INFO server: %w", err)
	}
	s.name = serverName(info)
	return s, nil
}

// Write collects the server's output, for errors.
func (s *redisServer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

func (s *redisServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// close kills the server, waits for it and removes its directory.
func (s *redisServer) close() error {
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

// serverName names the server of an INFO server reply: "valkey-9.1.2",
// "redis-7.0.15".
func serverName(info string) string {
	field := func(k string) string {
		for _, line := range strings.Split(info, "\n") {
			if key, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && key == k {
				return v
			}
		}
		return ""
	}
	if v := field("valkey_version"); v != "" {
		return "valkey-" + v
	}
	return "redis-" + field("redis_version")
}

// redisOptions are the client options of every Redis client of the run:
// go-redis honours ctx deadlines only with ContextTimeoutEnabled.
func redisOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// commandCalls reads INFO commandstats: calls per command name ("evalsha",
// "client|setinfo").
func commandCalls(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "calls" {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					out[strings.TrimPrefix(name, "cmdstat_")] = n
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("INFO commandstats: no command counted")
	}
	return out, nil
}

// rtHook is a go-redis hook that counts round trips on a client's command
// path: one per command, one per pipeline or transaction. PINGs are also
// counted apart, to tell them from the subscriptions' PINGs in the
// server's counts.
type rtHook struct {
	roundTrips atomic.Int64
	pings      atomic.Int64
}

func (h *rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.roundTrips.Add(1)
		if cmd.Name() == "ping" {
			h.pings.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.roundTrips.Add(1)
		return next(ctx, cmds)
	}
}
