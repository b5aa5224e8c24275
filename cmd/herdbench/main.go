// Command herdbench is `make bench`: it measures herd against the PING
// round trip of the same Redis in the same run, prints one table, and
// writes it into docs/performance.md (between the herdbench markers, so
// the hand-written text around them stays).
//
// It starts its own redis-server (the one on PATH, or -server) on a
// loopback port, unless REDIS_ADDR (host:port or a redis:// URL) names a
// server to use instead. Row 7 (the registry's Processes() on each backend)
// is also measured on every server executable listed, colon-separated, in
// HERD_REDIS_SERVERS (as for the tests), since older servers lack the
// hash-field expiration the faster backends need:
//
//	go run ./cmd/herdbench                 # about two minutes
//	go run ./cmd/herdbench -quick -out ''  # seconds; checks the suite works
//	REDIS_ADDR=127.0.0.1:6379 go run ./cmd/herdbench
//	go run ./cmd/herdbench -only herd -out '' -scale-n 10,100,1000 -scale-storm 2000
//
// The scale row set (rows 13-15) simulates a herd of N processes, each an
// election on a client of its own, at every size of -scale-n.
//
// On a server given by REDIS_ADDR it writes only keys starting with
// "herdbench-" and deletes them at the end; the rows read from INFO then
// also count other clients' commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/herdkit/herd/cmd/herdbench/internal/bench"
)

func main() {
	exit := 0
	defer func() { os.Exit(exit) }()
	var (
		out    = flag.String("out", "docs/performance.md", "markdown file to write the table into ('' to skip)")
		server = flag.String("server", "", "redis-server executable to start (default: redis-server on PATH); ignored when REDIS_ADDR is set")
		quick  = flag.Bool("quick", false, "measure every row only a little (seconds): checks the suite, numbers not worth publishing")
		only   = flag.String("only", "", "comma-separated steps to run, of: "+strings.Join(bench.Steps, ","))
		cpuOut = flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
		scaleN = flag.String("scale-n", "", "comma-separated herd sizes N of the scale row set (rows 13-15; default 10,100,1000, with -quick 10,100)")
		storm  = flag.Int("scale-storm", 0, "also count the error events of this many elections started at once (issue 28: 2000; 0 skips)")
	)
	flag.Parse()
	var sizes []int
	if *scaleN != "" {
		var err error
		if sizes, err = bench.ParseScaleSizes(*scaleN); err != nil {
			fmt.Fprintln(os.Stderr, "herdbench: -scale-n:", err)
			os.Exit(2)
		}
	}
	var steps []string
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(bench.Steps, s) {
			fmt.Fprintf(os.Stderr, "herdbench: -only: unknown step %q (want some of %s)\n", s, strings.Join(bench.Steps, ","))
			os.Exit(2)
		}
		steps = append(steps, s)
	}
	if *cpuOut != "" {
		f, err := os.Create(*cpuOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "herdbench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "herdbench:", err)
			os.Exit(1)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	scale := func(s *bench.ScaleSet) {
		if sizes != nil {
			s.Sizes = sizes
		}
		s.Storm = *storm
	}
	if err := run(ctx, os.Getenv("REDIS_ADDR"), *server, *out, *quick, steps, scale, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "herdbench:", err)
		exit = 1
	}
}

func run(ctx context.Context, addr, serverPath, out string, quick bool, only []string, scale func(*bench.ScaleSet), stdout, stderr io.Writer) error {
	env, where, closeServer, err := connect(ctx, addr, serverPath)
	if err != nil {
		return err
	}
	defer closeServer()

	plan := bench.DefaultPlan()
	if quick {
		plan = bench.QuickPlan()
	}
	plan.Only = only
	scale(&plan.ScaleSet)
	if len(only) > 0 && out != "" {
		return errors.New("-only measures part of the table: give -out '' as well, so docs/performance.md keeps the whole table")
	}
	if addr == "" {
		for _, p := range strings.Split(os.Getenv("HERD_REDIS_SERVERS"), ":") {
			if p = strings.TrimSpace(p); p != "" {
				plan.RegistryServers = append(plan.RegistryServers, p)
			}
		}
	}
	fmt.Fprintf(stderr, "herdbench: measuring on %s\n", where)
	rep := bench.Run(ctx, env, where, plan, stderr)
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if out != "" {
		if err := rep.WriteMarkdown(out); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
		fmt.Fprintf(stderr, "herdbench: wrote %s\n", out)
	}
	return rep.Err()
}

// connect returns the environment on REDIS_ADDR, or on a redis-server it
// starts, with a description of the server for the report.
func connect(ctx context.Context, addr, serverPath string) (*bench.Env, string, func(), error) {
	if addr != "" {
		opts, err := bench.ParseAddr(addr)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_ADDR: %w", err)
		}
		env := bench.NewEnv(opts)
		c := env.NewClient()
		defer c.Close()
		version, err := bench.ServerVersion(ctx, c)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_ADDR %s: %w", addr, err)
		}
		return env, fmt.Sprintf("%s at REDIS_ADDR %s (shared: INFO-based rows include other clients)", version, opts.Addr), func() {}, nil
	}
	if serverPath == "" {
		p, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, "", nil, errors.New("no redis-server on PATH: install one, pass -server, or set REDIS_ADDR")
		}
		serverPath = p
	}
	s, err := bench.StartServer(ctx, serverPath)
	if err != nil {
		return nil, "", nil, err
	}
	return bench.NewEnv(bench.ClientOptions(s.Addr)), fmt.Sprintf("%s started by herdbench on %s (no persistence)", s.Name, s.Addr), func() { _ = s.Close() }, nil
}
