package masterelection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialCause tells why the server cannot be reached when go-redis only said
// that a call's deadline passed: go-redis retries a failed dial until the
// call's context ends, and the dial's own error (connection refused, no
// such host) is not in what it returns. It dials the client's address once
// itself, the way the client would, and returns that error; nil when the
// dial succeeds or the client's type does not tell its address.
func dialCause(ctx context.Context, client redis.UniversalClient) error {
	c, ok := client.(*redis.Client)
	if !ok {
		return nil
	}
	opts := c.Options()
	timeout := min(max(opts.DialTimeout, 100*time.Millisecond), time.Second)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	network := opts.Network
	if network == "" {
		network = "tcp"
	}
	var conn net.Conn
	var err error
	if opts.Dialer != nil {
		conn, err = opts.Dialer(dctx, network, opts.Addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(dctx, network, opts.Addr)
	}
	if err != nil {
		return err
	}
	_ = conn.Close()
	return nil
}

// withDialCause adds the cause dialCause finds to err when err says no more
// than that a deadline passed.
func (n *node) withDialCause(ctx context.Context, err error, last error) error {
	if last != nil && !errors.Is(last, context.DeadlineExceeded) && !errors.Is(last, context.Canceled) {
		return err // the last error already says why
	}
	if cause := dialCause(ctx, n.client); cause != nil {
		return fmt.Errorf("%w (cannot reach redis: %w)", err, cause)
	}
	return err
}
