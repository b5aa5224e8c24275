package redisproc

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverPath returns redis-server from PATH, or skips the test (fails it
// with HERD_REQUIRE_REDIS=1, as CI runs).
func serverPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("HERD_REQUIRE_REDIS") == "1" {
			t.Fatal("no redis-server on PATH [HERD_REQUIRE_REDIS=1]")
		}
		t.Skip("no redis-server on PATH")
	}
	return p
}

func TestStartAnswersAndCloseRemovesAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, serverPath(t), "--maxclients", "100")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Name, "redis-") {
		t.Errorf("Name = %q, want redis-<version>", s.Name)
	}
	info, err := InfoServer(s.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if pid, _ := InfoField(info, "process_id"); pid != strconv.Itoa(s.proc.Pid()) {
		t.Errorf("process_id %q, want the started process %d", pid, s.proc.Pid())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s still there after Close: %v", s.dir, err)
	}
	if _, err := InfoServer(s.Addr, time.Second); err == nil {
		t.Error("the server still answers after Close")
	}
}

func TestSpawnOnATakenPort(t *testing.T) {
	path := serverPath(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	out := &TailBuffer{Limit: 1 << 16}
	dir := t.TempDir()
	p, err := Spawn(context.Background(), path, dir, Args(port, dir), port, out)
	if !errors.Is(err, ErrPortInUse) {
		if p != nil {
			_ = p.Kill(10 * time.Second)
		}
		t.Fatalf("Spawn on a taken port: %v, want ErrPortInUse", err)
	}
	if !strings.Contains(out.String(), "Address already in use") {
		t.Errorf("output lacks the bind error:\n%s", out.String())
	}
}

func TestStartBadArgsCarriesTheOutput(t *testing.T) {
	_, err := Start(context.Background(), serverPath(t), "--no-such-directive", "1")
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "no-such-directive") {
		t.Fatalf("Start with a bad directive: %v, want the server's complaint", err)
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name, out, want string
		ok              bool
	}{
		{"redis 7", "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0\n", "redis-7.0.15", true},
		{"redis 8", "Redis server v=8.0.6 sha=00000000:1 malloc=jemalloc-5.3.0 bits=64 build=82adc94040ad1c41", "redis-8.0.6", true},
		{"valkey 9", "Valkey server v=9.1.2 sha=00000000:1 malloc=jemalloc-5.3.0 bits=64 build=5f3d3fa89ded4932", "valkey-9.1.2", true},
		{"garbage", "hello", "", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseVersion(tt.out)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("ParseVersion(%q) = %q, %v; want %q, %v", tt.out, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\nconfig_file:\r\n"
	tests := []struct {
		field, want string
		ok          bool
	}{
		{"redis_version", "7.0.15", true},
		{"process_id", "42", true},
		{"config_file", "", true},
		{"tcp_port", "", false},
		{"Server", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			got, ok := InfoField(info, tt.field)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("InfoField(%q) = %q, %v; want %q, %v", tt.field, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	b := &TailBuffer{Limit: 8}
	for _, s := range []string{"abc", "defgh", "ijk"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "defghijk" {
		t.Fatalf("tail = %q, want %q", got, "defghijk")
	}
}
