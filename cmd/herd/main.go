// Command herd shows and steers the herds of a Redis: the master and its
// term, the registered processes, a live stream of changes, a hand-over on
// request, and a live web dashboard.
//
//	go install ./cmd/herd   # in a checkout of herd
//	herd -redis redis://127.0.0.1:6379 status
//	herd watch
//	herd step-down -to node-b
//	herd dashboard -listen 127.0.0.1:8080 -allow-step-down
//
// `herd -h` lists the commands, the URL forms and the exit statuses;
// docs/operating.md explains them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/herdkit/herd/cmd/herd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
