package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/pubsub"
)

// RoutingResult is what Routing measured.
type RoutingResult struct {
	// Latency is, per message sent one at a time, the time from the call of
	// Router.Send until the slave's handler was called.
	Latency []time.Duration
	// Messages, Senders and Elapsed: the throughput run sent Messages
	// messages from Senders goroutines of the master, spread evenly over the
	// slaves, and every handler had seen its share after Elapsed.
	Messages, Senders int
	Elapsed           time.Duration
}

// Rate is the throughput in messages per second.
func (r RoutingResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

type benchPayload struct {
	Seq int `json:"seq"`
}

// Routing starts a master (a MasterElection with a Router on its client)
// and slaves Subscribers (each with its own client, as separate processes),
// then measures latency Send → handler for latencyN messages sent one at a
// time round-robin, and the throughput of messages messages sent by senders
// goroutines at once.
func Routing(ctx context.Context, env *Env, slaves, latencyN, messages, senders int) (RoutingResult, error) {
	res := RoutingResult{Messages: messages, Senders: senders}
	if slaves < 1 || senders < 1 {
		return res, fmt.Errorf("routing needs at least 1 slave and 1 sender, got %d and %d", slaves, senders)
	}
	lock := env.LockName("routing")
	master, err := newWarmNode(ctx, env, Timings(lock, "router", 30*time.Second))
	if err != nil {
		return res, err
	}
	defer master.close(ctx)
	if err := master.Start(ctx); err != nil {
		return res, fmt.Errorf("start the master: %w", err)
	}
	if !master.IsMaster() {
		return res, errors.New("the only candidate of a fresh lock is not master")
	}
	cfg := pubsub.Config{LockName: lock}
	router, err := pubsub.NewRouter(master.client, master, nil, cfg)
	if err != nil {
		return res, err
	}

	latCh := make(chan time.Time, 1)
	var (
		received atomic.Int64
		target   atomic.Int64
		done     = make(chan struct{})
		doneOnce sync.Once
	)
	ids := make([]string, slaves)
	var subs []*pubsub.Subscriber
	var clients []*redis.Client
	defer func() {
		for _, s := range subs {
			_ = s.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for i := range slaves {
		ids[i] = fmt.Sprintf("slave-%d", i)
		c := env.NewClient()
		clients = append(clients, c)
		s, err := pubsub.NewSubscriber(c, ids[i], cfg)
		if err != nil {
			return res, err
		}
		if err := s.Handle("lat", func(context.Context, pubsub.Message) error {
			at := time.Now()
			select {
			case latCh <- at:
			default:
			}
			return nil
		}); err != nil {
			return res, err
		}
		if err := s.Handle("tput", func(context.Context, pubsub.Message) error {
			if n := received.Add(1); n == target.Load() {
				doneOnce.Do(func() { close(done) })
			}
			return nil
		}); err != nil {
			return res, err
		}
		if err := s.Start(ctx); err != nil {
			return res, fmt.Errorf("start subscriber %s: %w", ids[i], err)
		}
		subs = append(subs, s)
	}

	warm := min(latencyN/10, 100)
	for i := range warm + latencyN {
		t0 := time.Now()
		if err := router.Send(ctx, ids[i%slaves], "lat", benchPayload{Seq: i}); err != nil {
			return res, fmt.Errorf("send: %w", err)
		}
		select {
		case at := <-latCh:
			if i >= warm {
				res.Latency = append(res.Latency, at.Sub(t0))
			}
		case <-time.After(5 * time.Second):
			return res, fmt.Errorf("message %d not handled within 5s", i)
		}
	}

	target.Store(int64(messages))
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < messages; i += senders {
				if err := router.Send(ctx, ids[i%slaves], "tput", benchPayload{Seq: i}); err != nil {
					errs <- fmt.Errorf("send: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return res, err
	}
	select {
	case <-done:
		res.Elapsed = time.Since(t0)
	case <-time.After(30 * time.Second):
		return res, fmt.Errorf("throughput: %d of %d messages handled within 30s", received.Load(), messages)
	}
	return res, nil
}

// RawPublish is the floor under row 9's throughput: plain PUBLISH of a
// payload of the same size to slaves plain go-redis subscriptions (one
// connection each), sent by senders goroutines, batch messages per round
// trip (1: one PUBLISH per round trip, as Router.Send). It returns the
// messages per second until every subscriber had its share.
func RawPublish(ctx context.Context, env *Env, slaves, messages, senders, batch int) (float64, error) {
	if slaves < 1 || senders < 1 || batch < 1 {
		return 0, fmt.Errorf("raw publish needs at least 1 slave, sender and batch, got %d, %d, %d", slaves, senders, batch)
	}
	prefix := env.LockName("raw")
	pub := env.NewClient()
	defer pub.Close()
	var received atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	defer wg.Wait()
	defer cancel()
	channels := make([]string, slaves)
	for i := range slaves {
		channels[i] = fmt.Sprintf("%s:slave-%d", prefix, i)
		c := env.NewClient()
		defer c.Close()
		ps := c.Subscribe(ctx, channels[i])
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			return 0, fmt.Errorf("subscribe: %w", err)
		}
		ch := ps.Channel(redis.WithChannelSize(1000))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-rctx.Done():
					return
				case _, ok := <-ch:
					if !ok {
						return
					}
					if received.Add(1) == int64(messages) {
						once.Do(func() { close(done) })
					}
				}
			}
		}()
	}
	payload := make([]byte, 200) // about the size of a routed envelope
	for i := range payload {
		payload[i] = 'x'
	}
	errs := make(chan error, senders)
	var swg sync.WaitGroup
	t0 := time.Now()
	for w := range senders {
		swg.Add(1)
		go func() {
			defer swg.Done()
			mine := make([]int, 0, messages/senders+1)
			for i := w; i < messages; i += senders {
				mine = append(mine, i)
			}
			for len(mine) > 0 {
				n := min(batch, len(mine))
				var err error
				if n == 1 {
					err = pub.Publish(ctx, channels[mine[0]%slaves], payload).Err()
				} else {
					_, err = pub.Pipelined(ctx, func(p redis.Pipeliner) error {
						for _, i := range mine[:n] {
							p.Publish(ctx, channels[i%slaves], payload)
						}
						return nil
					})
				}
				if err != nil {
					errs <- err
					return
				}
				mine = mine[n:]
			}
		}()
	}
	swg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return 0, err
	}
	select {
	case <-done:
		return float64(messages) / time.Since(t0).Seconds(), nil
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("raw publish: %d of %d messages received within 30s", received.Load(), messages)
	}
}
