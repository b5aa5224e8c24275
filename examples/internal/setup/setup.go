// Package setup is the plumbing herd's examples share, so that each of them
// shows what it is about and not how it reads flags or prints: the flags
// that place a process in an election, Redis clients with the settings herd
// needs, a main that stops on Ctrl+C or SIGTERM, and a process's log lines.
// Nothing here is herd's API; a program of your own would write its own few
// lines instead.
package setup

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/herdkit/herd/masterelection"
)

// Node is where a process of an example runs and who it is: the flags
// -redis, -id, -lock and -lock-ttl.
type Node struct {
	// Redis is a redis:// URL or host:port.
	Redis string
	// ID is the node id, unique among the processes of the election.
	ID string
	// Lock is the lock name: processes with the same one elect one master.
	Lock string
	// LockTTL is the master lock's TTL; the election's other timings follow
	// it in the default ratios (see docs/tuning.md).
	LockTTL time.Duration
}

// Flags returns the flag set of the example name (the function Flags)
// with the node's flags on it: -redis (default $REDIS_ADDR, else
// redis://127.0.0.1:6379), -id (default <hostname>-<pid>), -lock (default
// lock) and -lock-ttl (default 6s).
func (n *Node) Flags(name, lock string) *flag.FlagSet {
	fs := Flags(name)
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "redis://127.0.0.1:6379"
	}
	host, _ := os.Hostname()
	fs.StringVar(&n.Redis, "redis", addr, "Redis URL (redis://host:port/db) or host:port; default $REDIS_ADDR or redis://127.0.0.1:6379")
	fs.StringVar(&n.ID, "id", fmt.Sprintf("%s-%d", host, os.Getpid()), "node id, unique in the cluster")
	fs.StringVar(&n.Lock, "lock", lock, "lock name: the processes with the same one elect one master")
	fs.DurationVar(&n.LockTTL, "lock-ttl", 6*time.Second, "master lock TTL; the other timings follow the default ratios (see docs/tuning.md)")
	return fs
}

// Client returns a client of the node's Redis (see Options). The caller
// closes it.
func (n Node) Client() (*redis.Client, error) {
	opts, err := Options(n.Redis)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opts), nil
}

// RedisFlag registers -redis for a demo that runs on an embedded miniredis
// unless told otherwise: its default is $REDIS_ADDR, else "", which Connect
// takes for the embedded server.
func RedisFlag(fs *flag.FlagSet) *string {
	return fs.String("redis", os.Getenv("REDIS_ADDR"), "Redis to run on, host:port or redis:// URL (default: $REDIS_ADDR, else an embedded miniredis)")
}

// Options returns client options for addr, a redis:// URL or host:port,
// with the settings herd needs: ContextTimeoutEnabled (herd's deadlines
// only hold with it), no CLIENT SETINFO and no maintenance notifications
// (not every server has them).
func Options(addr string) (*redis.Options, error) {
	var opts *redis.Options
	if strings.Contains(addr, "://") {
		var err error
		if opts, err = redis.ParseURL(addr); err != nil {
			return nil, fmt.Errorf("-redis %q: %w", addr, err)
		}
	} else {
		opts = &redis.Options{Addr: addr}
	}
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opts, nil
}

// Connect returns a factory of clients of addr (see Options), one per node
// as separate processes would have, or of an embedded miniredis when addr
// is "". where describes the server for the output; cleanup stops the
// embedded server. It fails when the server does not answer PING.
func Connect(addr string) (newClient func() *redis.Client, where string, cleanup func(), err error) {
	cleanup = func() {}
	where = addr
	if addr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("start embedded miniredis: %w", err)
		}
		mr.ClockTTL(true) // TTLs follow the wall clock, as on a real server
		addr, where, cleanup = mr.Addr(), "an embedded miniredis ("+mr.Addr()+")", mr.Close
	}
	opts, err := Options(addr)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	probe := redis.NewClient(opts)
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := probe.Ping(ctx).Err(); err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	return func() *redis.Client { return redis.NewClient(opts) }, where, cleanup, nil
}

// Flags returns the flag set of the example name, for Main or Demo to
// parse from the command line: a bad flag exits with status 2, -h lists the
// flags.
func Flags(name string) *flag.FlagSet { return flag.NewFlagSet(name, flag.ExitOnError) }

// Main parses the command line into fs (see Flags), then runs run with a
// ctx that ends on Ctrl+C or SIGTERM, and exits with status 1, printing
// "name: error" (name is fs's), when it returns an error.
func Main(fs *flag.FlagSet, run func(ctx context.Context) error) {
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag has exited already
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", fs.Name(), err)
		os.Exit(1)
	}
}

// Demo is Main for a demo whose nodes all run in this process: it adds
// -redis to fs (see RedisFlag), and run gets a factory of clients of that
// Redis, or of an embedded miniredis (see Connect), after the line
// "<title> on <where>".
func Demo(fs *flag.FlagSet, title string, run func(ctx context.Context, newClient func() *redis.Client) error) {
	addr := RedisFlag(fs)
	Main(fs, func(ctx context.Context) error {
		newClient, where, cleanup, err := Connect(*addr)
		if err != nil {
			return err
		}
		defer cleanup()
		fmt.Printf("%s on %s\n", title, where)
		return run(ctx, newClient)
	})
}

// Every calls f every d until ctx ends.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Log prints the lines of one process of an example, each with the time
// and the node id. It is safe for concurrent use.
type Log struct {
	mu  sync.Mutex
	out io.Writer
	id  string
}

// NewLog returns the Log of node id, which prints to out.
func NewLog(out io.Writer, id string) *Log { return &Log{out: out, id: id} }

// Printf prints one line: the time, the node id, then the text.
func (l *Log) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.out, "%s %-10s %s\n", time.Now().Format("15:04:05.000"), l.id, fmt.Sprintf(format, args...))
}

// Roles is an OnEvent handler that prints the events every example shows:
// "MASTER with term N", "no longer master (term N)", "slave" when an
// election makes the process a slave, and "error: ..."; it ignores the
// others.
func (l *Log) Roles(e masterelection.Event) {
	switch e.Kind {
	case masterelection.EventMasterAcquired:
		l.Printf("MASTER with term %d", e.Term)
	case masterelection.EventMasterLost:
		l.Printf("no longer master (term %d)", e.Term)
	case masterelection.EventElectionCompleted:
		if !e.IsMaster {
			l.Printf("slave")
		}
	case masterelection.EventError:
		l.Printf("error: %v", e.Err)
	}
}
