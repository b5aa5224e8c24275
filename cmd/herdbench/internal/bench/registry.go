package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// Backends are the registry backends a server is asked about, best first.
var Backends = []registry.Backend{registry.BackendNative, registry.BackendHPExpire, registry.BackendEmulated}

// OpenRegistry opens a registry of lockName on c with backend b. It
// returns an error wrapping registry.ErrBackendUnsupported when the server
// does not run b.
func OpenRegistry(ctx context.Context, c redis.UniversalClient, lockName string, b registry.Backend) (*registry.Registry, error) {
	return registry.New(ctx, c, keyspace.NewKeys(lockName, false), registry.Config{Backend: b})
}

// slaveInfo is the entry of a slave process as herd writes it.
func slaveInfo(id string) registry.ProcessInfo {
	return registry.ProcessInfo{
		ProcessID:  id,
		NodeID:     id,
		Role:       registry.RoleSlave,
		Identifier: "herdbench",
		Capabilities: registry.Capabilities{
			CanProcessDetections: true, MaxSubscriptions: 100, PreferredWorkload: 50,
		},
	}
}

// RegisterOp registers the slave id through reg again and again: each call
// is a full registration (entry, TTL and notice), one round trip.
func RegisterOp(reg *registry.Registry, id string) Op {
	info := slaveInfo(id)
	return Op{
		Name: "register",
		Do:   func(ctx context.Context) error { return reg.Register(ctx, info) },
		Close: func(ctx context.Context) error {
			return reg.Unregister(ctx, id)
		},
	}
}

// HeartbeatOp registers the slave id through reg and returns the Op that
// heartbeats it.
func HeartbeatOp(ctx context.Context, reg *registry.Registry, id string) (Op, error) {
	if err := reg.Register(ctx, slaveInfo(id)); err != nil {
		return Op{}, fmt.Errorf("register before heartbeat: %w", err)
	}
	return Op{
		Name:  "heartbeat",
		Do:    func(ctx context.Context) error { return reg.Heartbeat(ctx, id) },
		Close: func(ctx context.Context) error { return reg.Unregister(ctx, id) },
	}, nil
}

// ProcessesOp reads every entry of reg and checks that there are want.
func ProcessesOp(reg *registry.Registry, want int) Op {
	return Op{
		Name: fmt.Sprintf("processes(%d)", want),
		Do: func(ctx context.Context) error {
			ps, err := reg.Processes(ctx)
			if err == nil && len(ps) != want {
				err = fmt.Errorf("%w: %d processes listed, %d registered", errUnexpected, len(ps), want)
			}
			return err
		},
	}
}

// Populate registers n slaves named prefix-0 ... through reg, workers at a
// time.
func Populate(ctx context.Context, reg *registry.Registry, prefix string, n, workers int) error {
	ids := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				if err := reg.Register(ctx, slaveInfo(id)); err != nil {
					errs <- err
					for range ids { // drain, so the producer ends
					}
					return
				}
			}
		}()
	}
	for i := range n {
		ids <- fmt.Sprintf("%s-%d", prefix, i)
	}
	close(ids)
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// SlaveRegistered measures, reps times, the time from a slave's
// registry.Register (its own client and registry, as a separate process)
// to the OnJoin callback of the master's SlaveTracker, which is fed the
// events channel by a subscription of the master's client, as the election
// feeds it. Each round registers a new slave.
func SlaveRegistered(ctx context.Context, env *Env, reps int) ([]time.Duration, error) {
	lock := env.LockName("joined")
	keys := keyspace.NewKeys(lock, false)
	mc, sc := env.NewClient(), env.NewClient()
	defer mc.Close()
	defer sc.Close()
	master, err := OpenRegistry(ctx, mc, lock, registry.BackendAuto)
	if err != nil {
		return nil, err
	}
	slave, err := OpenRegistry(ctx, sc, lock, registry.BackendAuto)
	if err != nil {
		return nil, err
	}
	joined := make(chan joinEvent, 16)
	tracker, err := registry.NewSlaveTracker(master, registry.TrackerConfig{
		Self: "master",
		OnJoin: func(s registry.SlaveNode) {
			at := time.Now()
			select {
			case joined <- joinEvent{s.NodeID, at}:
			default:
			}
		},
	})
	if err != nil {
		return nil, err
	}
	ps := mc.Subscribe(ctx, keys.RegistryEvents)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription is confirmed
		return nil, fmt.Errorf("subscribe %s: %w", keys.RegistryEvents, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = tracker.Run(rctx)
	}()
	go func() {
		defer wg.Done()
		readMessages(rctx, ps.Channel(), func(m *redis.Message) { tracker.Notice([]byte(m.Payload)) })
	}()
	var samples []time.Duration
	for r := range reps + 1 { // round 0 is a warm-up, and waits for the first sweep
		id := fmt.Sprintf("slave-%d", r)
		t0 := time.Now()
		if err := slave.Register(ctx, slaveInfo(id)); err != nil {
			return nil, err
		}
		timeout := time.After(5 * time.Second)
	wait:
		for {
			select {
			case ev := <-joined:
				if ev.id == id {
					if r > 0 {
						samples = append(samples, ev.at.Sub(t0))
					}
					break wait
				}
			case <-timeout:
				return nil, fmt.Errorf("slave-registered, round %d: no join within 5s of Register", r)
			}
		}
	}
	return samples, nil
}

type joinEvent struct {
	id string
	at time.Time
}
