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
	"github.com/herdkit/herd/internal/rdb"
)

// The test binary doubles as a slave process for the kill -9 test: with
// nodeEnv set, TestMain runs runNode instead of the tests.
const (
	nodeEnv       = "HERD_DURABLE_TEST_NODE"        // the process id
	nodeAddrEnv   = "HERD_DURABLE_TEST_ADDR"        // the Redis address
	nodeLedgerEnv = "HERD_DURABLE_TEST_LEDGER"      // the list every handling is recorded in
	nodeSlowEnv   = "HERD_DURABLE_TEST_HANDLE_WAIT" // a wait inside each handler, after the record
	// With burstEnv set instead, TestMain runs runBurst: a master process.
	burstEnv = "HERD_DURABLE_TEST_BURST" // the number of messages to send
)

// runBurst is a master process for the master-killed test: it takes the
// lock (1 s TTL, never renewed: the process is killed before it matters)
// as "burst-master", sends burstEnv messages round-robin to the slaves
// s1..s3 with a durable.Router, records the id of each one stored in the
// ledger list, prints "sent", and waits to be killed.
func runBurst() int {
	n, _ := strconv.Atoi(os.Getenv(burstEnv))
	addr, ledger := os.Getenv(nodeAddrEnv), os.Getenv(nodeLedgerEnv)
	client := redis.NewClient(clientOptions(addr))
	defer client.Close()
	ctx := context.Background()
	a, err := rdb.Acquire(ctx, client, keys(), "burst-master", 30*time.Second, nil, 0)
	if err != nil || a.Term <= 0 {
		fmt.Fprintln(os.Stderr, "acquire:", a, err)
		return 2
	}
	l := &fakeMastership{id: "burst-master"}
	l.term.Store(a.Term)
	l.master.Store(true)
	r, err := durable.NewRouter(client, l, nil, fast())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := range n {
		id, err := r.Send(ctx, fmt.Sprintf("s%d", 1+i%3), "work", i)
		if err != nil {
			fmt.Fprintln(os.Stderr, "send:", err)
			return 2
		}
		if err := client.RPush(ctx, ledger, id).Err(); err != nil {
			fmt.Fprintln(os.Stderr, "ledger:", err)
			return 2
		}
	}
	fmt.Println("sent")
	time.Sleep(time.Hour) // until SIGKILL
	return 0
}

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
