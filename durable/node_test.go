package durable_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
)

// The test binary doubles as a slave process for the kill -9 test: with
// nodeEnv set, TestMain runs runNode instead of the tests.
const (
	nodeEnv       = "HERD_DURABLE_TEST_NODE"        // the process id
	nodeAddrEnv   = "HERD_DURABLE_TEST_ADDR"        // the Redis address
	nodeLedgerEnv = "HERD_DURABLE_TEST_LEDGER"      // the list every handling is recorded in
	nodeSlowEnv   = "HERD_DURABLE_TEST_HANDLE_WAIT" // a wait inside each handler, after the record
)

// runNode consumes the inbox of its process id until it is killed, and
// records each handling in the ledger list as "<process id> <message id>
// <deliveries>" before its handler returns, so a kill between the record
// and the acknowledgement shows up as a duplicate.
func runNode() int {
	id, addr, ledger := os.Getenv(nodeEnv), os.Getenv(nodeAddrEnv), os.Getenv(nodeLedgerEnv)
	wait, _ := time.ParseDuration(os.Getenv(nodeSlowEnv))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	client := redis.NewClient(clientOptions(addr))
	defer client.Close()
	con, err := durable.NewConsumer(client, id, fast())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	con.HandleDefault(ledgerHandler(client, ledger, id, wait))
	if err := con.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	<-ctx.Done()
	_ = con.Close()
	return 0
}

// ledgerHandler records each delivery in the ledger list, then waits.
func ledgerHandler(client redis.UniversalClient, ledger, id string, wait time.Duration) durable.Handler {
	return func(ctx context.Context, d durable.Delivery) error {
		if err := client.RPush(ctx, ledger, id+" "+d.ID+" "+strconv.FormatInt(d.Deliveries, 10)).Err(); err != nil {
			return err
		}
		if wait > 0 {
			time.Sleep(wait)
		}
		return nil
	}
}
