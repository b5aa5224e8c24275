package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ReadyTimeout bounds Spawn's wait from exec to a server answering as
// itself. It is generous because the machine may be busy (tests under
// -race, a benchmark); it bounds a failure and is never a measurement.
const ReadyTimeout = 20 * time.Second

// ErrPortInUse reports a server that could not bind its port: another
// program took it after FreePort chose it. Choose another port and try again.
var ErrPortInUse = errors.New("redisproc: port already in use")

// Proc is one server process started by Spawn. Its methods are safe for
// concurrent use.
type Proc struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been reaped
	waitErr error         // written before done is closed
}

// Args returns the arguments every server process here starts with: bound
// to 127.0.0.1 on port, working in dir, persisting nothing, in the
// foreground, logging to stdout. Arguments appended after them win for
// single-valued settings.
func Args(port int, dir string) []string {
	return []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
	}
}

// Spawn runs the executable at path with args in dir, its stdout and
// stderr written to out, and waits until the process answers on
// 127.0.0.1:port as itself, at most ReadyTimeout or until ctx ends. On
// error the process has been killed and reaped; the error wraps
// ErrPortInUse when the port was taken.
func Spawn(ctx context.Context, path, dir string, args []string, port int, out io.Writer) (*Proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	own := &TailBuffer{Limit: 64 << 10} // this process only, to tell why it exited
	w := io.MultiWriter(out, own)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = SysProcAttr()
	// A forked child (BGSAVE) keeps the output pipe open; do not let it
	// hold Wait after the server itself has gone.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("exec %s: %w", path, err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx, port, own); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, err
	}
	return p, nil
}

// waitReady polls until the server on port answers INFO with p's pid. The
// pid check matters: when the port was taken by another server between
// FreePort and bind, that other server answers while ours is exiting.
func (p *Proc) waitReady(ctx context.Context, port int, own *TailBuffer) error {
	want := strconv.Itoa(p.Pid())
	deadline := time.Now().Add(ReadyTimeout)
	for {
		select {
		case <-p.done:
			if strings.Contains(own.String(), "Address already in use") {
				return fmt.Errorf("%w: %s", ErrPortInUse, Addr(port))
			}
			return fmt.Errorf("server exited before answering: %v", p.waitErr)
		default:
		}
		info, err := InfoServer(Addr(port), time.Second)
		if err == nil {
			if pid, _ := InfoField(info, "process_id"); pid == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s within %v (last error: %v)", Addr(port), ReadyTimeout, err)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited and been reaped.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns what waiting for the process returned (an *exec.ExitError
// for a process killed or exiting non-zero); nil until Done is closed.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.waitErr
}

// Kill sends SIGKILL to the process (a process stopped by SIGSTOP dies too)
// and waits at most timeout until it is reaped. A process that has already
// exited is no error.
func (p *Proc) Kill(timeout time.Duration) error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGKILL pid %d: %w", p.Pid(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("pid %d not reaped %v after SIGKILL", p.Pid(), timeout)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns "127.0.0.1:<port>".
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// InfoServer sends INFO server on a connection of its own and returns the
// reply. It speaks RESP directly rather than through a go-redis client so
// that a refused dial leaves nothing behind (go-redis pools start a
// background redial goroutine after dial errors).
func InfoServer(addr string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	head = strings.TrimRight(head, "\r\n")
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO server: unexpected reply %q", head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("INFO server: unexpected reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// InfoField returns the value of field in an INFO reply, such as
// InfoField(info, "redis_version").
func InfoField(info, field string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if ok && k == field {
			return v, true
		}
	}
	return "", false
}
