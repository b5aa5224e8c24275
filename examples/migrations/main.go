// Command migrations shows the specification's database-migration pattern:
// the master runs the schema migrations once, the slaves wait until the
// schema is current (or give up after -wait) before they serve.
//
//	go run ./examples/migrations -redis redis://127.0.0.1:6379 -id a
//	go run ./examples/migrations -redis redis://127.0.0.1:6379 -id b
//
// The "database" is Redis itself, so the example needs nothing else: the
// schema version and the migrations' data are keys next to the election's.
// With SQL, run each step and the version update in one transaction in the
// same way.
//
// How it stays correct:
//
//   - Only the master migrates (OnMasterAcquired + RunIfMaster), and every
//     process checks the schema version before it serves, so a process that
//     becomes master later finds the work done and does nothing.
//   - Each step is one MULTI/EXEC that WATCHes the version key and the
//     election's lock key and checks, inside the watch, that the version is
//     still the one before the step and the lock is still this node's: a
//     step is applied at most once, and never by a node that has lost the
//     lock (EXEC aborts when the lock was renewed or taken meanwhile, and
//     the step is retried or abandoned).
//   - Slaves learn that the schema is current from a "migrated" message the
//     master broadcasts, and, since pub/sub can lose it, also by polling the
//     version; they give up after -wait.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

type options struct {
	setup.Node // -redis, -id, -lock, -lock-ttl
	Wait       time.Duration
	Candidate  bool
}

func main() {
	o := options{}
	fs := o.Node.Flags("migrations", "herd-migrations-example")
	fs.DurationVar(&o.Wait, "wait", 30*time.Second, "how long a slave waits for the schema before it gives up")
	fs.BoolVar(&o.Candidate, "candidate", true, "contend for mastership (false: never migrate, only wait)")
	setup.Main(fs, func(ctx context.Context) error {
		p, err := newProcess(o, os.Stdout)
		if err != nil {
			return err
		}
		return p.run(ctx)
	})
}

// migration is one schema step, applied inside a MULTI/EXEC.
type migration struct {
	version int
	what    string
	apply   func(ctx context.Context, k appKeys, tx redis.Pipeliner)
}

// migrations is the schema history; versions are 1, 2, 3, ... in order.
var migrations = []migration{
	{1, "create the camera catalogue", func(ctx context.Context, k appKeys, tx redis.Pipeliner) {
		tx.SAdd(ctx, k.cameras, "lobby", "parking", "loading-dock")
	}},
	{2, "give every camera a location", func(ctx context.Context, k appKeys, tx redis.Pipeliner) {
		for _, c := range []string{"lobby", "parking", "loading-dock"} {
			tx.HSet(ctx, k.camera(c), "location", "site-1")
		}
	}},
	{3, "index the cameras by location", func(ctx context.Context, k appKeys, tx redis.Pipeliner) {
		tx.SAdd(ctx, k.byLocation("site-1"), "lobby", "parking", "loading-dock")
	}},
}

// latest is the version the code needs.
var latest = migrations[len(migrations)-1].version

// appKeys names the application's keys, under the election's prefix.
type appKeys struct {
	prefix  string
	version string // the schema version, an integer
	history string // hash: version -> "node term time" of the step
	cameras string
}

func newAppKeys(lock string) appKeys {
	p := keyspace.NewKeys(lock, false).Prefix + ":app"
	return appKeys{prefix: p, version: p + ":schema-version", history: p + ":schema-history", cameras: p + ":cameras"}
}

func (k appKeys) camera(id string) string      { return k.prefix + ":camera:" + id }
func (k appKeys) byLocation(loc string) string { return k.prefix + ":cameras-by-location:" + loc }

// errNotMaster is returned by a step when the lock is no longer this node's.
var errNotMaster = errors.New("migrations: the lock is no longer this node's")

// process is one process of the example.
type process struct {
	o      options
	log    *setup.Log
	client *redis.Client
	m      *masterelection.MasterElection
	sub    *pubsub.Subscriber
	router *pubsub.Router
	keys   appKeys
	lock   keyspace.Keys

	notice  chan struct{} // a "migrated" message arrived or this process migrated
	serving chan struct{} // closed when the schema is current and the process serves

	mu      sync.Mutex
	applied []int // versions this process applied
}

func newProcess(o options, out io.Writer) (*process, error) {
	if o.Wait <= 0 {
		return nil, fmt.Errorf("-wait %v: must be positive", o.Wait)
	}
	client, err := o.Client()
	if err != nil {
		return nil, err
	}
	p := &process{o: o, log: setup.NewLog(out, o.ID), client: client, keys: newAppKeys(o.Lock), lock: keyspace.NewKeys(o.Lock, false), notice: make(chan struct{}, 1), serving: make(chan struct{})}
	// The timings left unset follow LockTTL in the default ratios (docs/tuning.md).
	cfg := masterelection.Config{LockName: o.Lock, NodeID: o.ID, Identifier: o.ID, LockTTL: o.LockTTL, NonCandidate: !o.Candidate}
	if p.m, err = masterelection.New(p.client, cfg); err != nil {
		_ = p.client.Close()
		return nil, err
	}
	pcfg := pubsub.Config{LockName: o.Lock}
	scfg := pcfg
	scfg.Terms = p.m
	scfg.OnError = func(err error) { p.log.Printf("routing: %v", err) }
	if p.sub, err = pubsub.NewSubscriber(p.client, o.ID, scfg); err != nil {
		_ = p.client.Close()
		return nil, err
	}
	if p.router, err = pubsub.NewRouter(p.client, p.m, p.m, pcfg); err != nil {
		_ = p.client.Close()
		return nil, err
	}
	_ = p.sub.Handle("migrated", func(_ context.Context, msg pubsub.Message) error {
		p.log.Printf("<- migrated, from %s", msg.From)
		p.signal()
		return nil
	})
	p.m.OnMasterAcquired(p.asMaster)
	p.m.OnEvent(p.log.Roles)
	return p, nil
}

func (p *process) signal() {
	select {
	case p.notice <- struct{}{}:
	default:
	}
}

// run joins the election, waits for the schema, serves until ctx ends and
// leaves. It returns an error when the schema is not current within -wait.
func (p *process) run(ctx context.Context) (err error) {
	defer p.client.Close()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, p.m.Stop(sctx), p.sub.Close())
	}()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.sub.Start(sctx); err != nil { // before the election: no notice is missed
		return err
	}
	if err := p.m.Start(sctx); err != nil {
		return err
	}
	v, err := p.waitForSchema(ctx)
	if err != nil {
		return err
	}
	n, err := p.client.SCard(ctx, p.keys.cameras).Result()
	if err != nil {
		return fmt.Errorf("read the catalogue: %w", err)
	}
	p.log.Printf("serving with schema v%d: %d cameras in the catalogue", v, n)
	close(p.serving)
	<-ctx.Done()
	return nil
}

// waitForSchema returns once the schema is at least at latest: at once if
// it is, else on a "migrated" notice or a poll that finds it so. It gives
// up after -wait.
func (p *process) waitForSchema(ctx context.Context) (int, error) {
	deadline := time.NewTimer(p.o.Wait)
	defer deadline.Stop()
	poll := time.NewTicker(max(p.o.LockTTL/6, 50*time.Millisecond))
	defer poll.Stop()
	said := false
	for {
		v, err := p.version(ctx)
		switch {
		case err != nil:
			p.log.Printf("read the schema version: %v", err)
		case v >= latest:
			return v, nil
		case !said && p.m.IsMaster():
			p.log.Printf("schema at v%d, the code needs v%d: migrating", v, latest)
			said = true
		case !said:
			p.log.Printf("schema at v%d, the code needs v%d: waiting up to %v for the master to migrate", v, latest, p.o.Wait)
			said = true
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline.C:
			return 0, fmt.Errorf("the schema is not at v%d after %v: no master has migrated it", latest, p.o.Wait)
		case <-p.notice:
		case <-poll.C:
		}
	}
}

func (p *process) version(ctx context.Context) (int, error) {
	s, err := p.client.Get(ctx, p.keys.version).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("key %q holds %q, not a version", p.keys.version, s)
	}
	return v, nil
}

// asMaster is the OnMasterAcquired handler: migrate, then tell the slaves.
func (p *process) asMaster(ctx context.Context, term int64) {
	ran, err := p.m.RunIfMaster(ctx, p.migrate)
	switch {
	case !ran:
		return // the mastership ended already
	case ctx.Err() != nil:
		p.log.Printf("migrations interrupted: the mastership ended (the next master goes on from the last step)")
		return
	case err != nil:
		p.log.Printf("migrations stopped: %v", err)
		return
	}
	p.signal()
	delivered, err := p.router.Broadcast(ctx, "migrated", map[string]int{"version": latest})
	if err != nil && !errors.Is(err, pubsub.ErrNoSubscriber) {
		p.log.Printf("-> migrated: %v", err)
		return
	}
	p.log.Printf("-> migrated, to %d slaves", delivered)
}

// migrate applies the missing steps, each at most once.
func (p *process) migrate(ctx context.Context, term int64) error {
	for _, step := range migrations {
		if err := p.step(ctx, term, step); err != nil {
			return fmt.Errorf("v%d (%s): %w", step.version, step.what, err)
		}
	}
	return nil
}

// step applies one migration if the schema is at the version before it,
// while the lock is still this node's; a concurrent change of either key
// aborts the transaction, and the step is tried again.
func (p *process) step(ctx context.Context, term int64, step migration) error {
	for attempt := 0; attempt < 10; attempt++ {
		applied := false
		err := p.client.Watch(ctx, func(tx *redis.Tx) error {
			holder, err := tx.Get(ctx, p.lock.Master).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if holder != p.o.ID {
				return errNotMaster
			}
			s, err := tx.Get(ctx, p.keys.version).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			v, _ := strconv.Atoi(s)
			if v >= step.version {
				return nil // done before, by this master or an earlier one
			}
			if v != step.version-1 {
				return fmt.Errorf("the schema is at v%d, not v%d", v, step.version-1)
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				step.apply(ctx, p.keys, pipe)
				pipe.Set(ctx, p.keys.version, step.version, 0)
				pipe.HSet(ctx, p.keys.history, strconv.Itoa(step.version), fmt.Sprintf("%s term %d at %s", p.o.ID, term, time.Now().UTC().Format(time.RFC3339Nano)))
				return nil
			})
			applied = err == nil
			return err
		}, p.keys.version, p.lock.Master)
		switch {
		case errors.Is(err, redis.TxFailedErr):
			continue // the lock was renewed or the version changed meanwhile: look again
		case err != nil:
			return err
		}
		if applied {
			p.mu.Lock()
			p.applied = append(p.applied, step.version)
			p.mu.Unlock()
			p.log.Printf("migrated to v%d: %s", step.version, step.what)
		}
		return nil
	}
	return errors.New("the keys kept changing during the transaction")
}
