package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// etcdServer is a single-member etcd started in this process (package
// embed) on loopback ports, its data in a temporary directory (fsync on,
// as etcd runs by default).
type etcdServer struct {
	e        *embed.Etcd
	endpoint string
	dir      string
}

// startEtcd starts the server with a 50 ms heartbeat tick and a 500 ms
// election timeout, so that the smallest lease it grants is 1 s (etcd
// grants at least 1.5 election timeouts, rounded up to a second; with its
// defaults, 100 ms and 1 s, a 1 s session would live 2 s).
func startEtcd() (*etcdServer, error) {
	dir, err := os.MkdirTemp("", "herdpeers-etcd-")
	if err != nil {
		return nil, err
	}
	urlOf := func() (url.URL, error) {
		p, err := redisproc.FreePort()
		if err != nil {
			return url.URL{}, err
		}
		return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", p)}, nil
	}
	client, err := urlOf()
	if err != nil {
		return nil, err
	}
	peerURL, err := urlOf()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "peers"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 50, 500
	cfg.LogLevel = "fatal" // its shutdown logs errors about closed listeners
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		_ = os.RemoveAll(dir)
		return nil, errors.New("start etcd: not ready after 30s")
	}
	return &etcdServer{e: e, endpoint: client.String(), dir: dir}, nil
}

func (s *etcdServer) close() {
	s.e.Close()
	_ = os.RemoveAll(s.dir)
}

// requestCounter counts the requests etcd clients send: every unary call
// and every message sent on a stream (a lease keep-alive, a watch
// creation) is one round trip.
type requestCounter struct{ n atomic.Int64 }

func (rc *requestCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			rc.n.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return countedStream{ClientStream: s, n: &rc.n}, nil
		}),
	}
}

type countedStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countedStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

// connectEtcd returns a client of endpoint whose connection is
// established (one Get answered).
func connectEtcd(ctx context.Context, endpoint string, rc *requestCounter) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if rc != nil {
		cfg.DialOptions = rc.dialOptions()
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	if _, err := c.Get(ctx, "herdpeers-warm"); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	return c, nil
}

// ttlSeconds is t.TTL in etcd's lease unit, at least 1 s.
func ttlSeconds(t timings) int { return max(1, int(t.TTL/time.Second)) }

// etcdPeer is etcd's concurrency.Election, each process with a client and
// a session of its own: Campaign to lead, Resign and close the session
// to leave.
func etcdPeer(endpoint string) peer {
	rc := &requestCounter{}
	return peer{
		name:    "etcd",
		store:   "etcd",
		counter: rc.n.Load,
		newNode: func(ctx context.Context, lock, id string, t timings) (node, error) {
			c, err := connectEtcd(ctx, endpoint, rc)
			if err != nil {
				return nil, err
			}
			return &etcdNode{client: c, prefix: "/herdpeers/" + lock, id: id, ttl: ttlSeconds(t), acq: make(chan time.Time, 4)}, nil
		},
		uncontested: func(ctx context.Context, lock string) (time.Duration, time.Duration, error) {
			c, err := connectEtcd(ctx, endpoint, nil)
			if err != nil {
				return 0, 0, err
			}
			defer c.Close()
			t0 := time.Now()
			s, err := concurrency.NewSession(c, concurrency.WithTTL(1))
			if err != nil {
				return 0, 0, fmt.Errorf("etcd session: %w", err)
			}
			defer s.Close()
			t1 := time.Now()
			e := concurrency.NewElection(s, "/herdpeers/"+lock)
			if err := e.Campaign(ctx, "solo"); err != nil {
				return 0, 0, fmt.Errorf("etcd campaign: %w", err)
			}
			d, part := time.Since(t0), time.Since(t1)
			return d, part, e.Resign(ctx)
		},
	}
}

type etcdNode struct {
	client *clientv3.Client
	prefix string
	id     string
	ttl    int
	acq    chan time.Time

	mu       sync.Mutex
	session  *concurrency.Session  // set by start
	election *concurrency.Election // set by start
	cancel   context.CancelFunc    // ends the campaign
	done     chan struct{}         // closed when Campaign has returned
	leading  bool
}

func (n *etcdNode) start(ctx context.Context) error {
	s, err := concurrency.NewSession(n.client, concurrency.WithTTL(n.ttl))
	if err != nil {
		return fmt.Errorf("etcd session: %w", err)
	}
	e := concurrency.NewElection(s, n.prefix)
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.mu.Lock()
	n.session, n.election, n.cancel, n.done = s, e, cancel, make(chan struct{})
	n.mu.Unlock()
	go func() {
		defer close(n.done)
		if e.Campaign(cctx, n.id) == nil {
			n.mu.Lock()
			n.leading = true
			n.mu.Unlock()
			stamp(n.acq)
		}
	}()
	return nil
}

func (n *etcdNode) acquired() <-chan time.Time { return n.acq }

func (n *etcdNode) leader() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leading
}

// stop resigns when leading, ends a campaign still waiting, closes the
// session (revoking its lease) and the client.
func (n *etcdNode) stop(ctx context.Context) error {
	n.mu.Lock()
	s, e, cancel, done, leading := n.session, n.election, n.cancel, n.done, n.leading
	n.leading = false
	n.mu.Unlock()
	var errs []error
	if leading {
		errs = append(errs, e.Resign(ctx))
	}
	if cancel != nil {
		cancel()
		<-done
		errs = append(errs, s.Close())
	}
	errs = append(errs, n.client.Close())
	return errors.Join(errs...)
}

// crash closes the client: the keep-alives stop, nothing is revoked, the
// lease expires after its TTL.
func (n *etcdNode) crash() { _ = n.client.Close() }
