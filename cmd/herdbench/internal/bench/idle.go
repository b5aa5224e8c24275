package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
)

// IdleSet is the idle-cost rows (16a-16e): N elections on one lock, each on
// a client of its own (no Subscriber), left Settle after every Start
// returned (the first registrations, sweeps and checks behind them), then
// idle for Window, with the library's defaults at LockTTL and with
// docs/tuning.md's large-herd set; and the floor under the defaults, as
// many clients sending one PING each per LockTTL/3. The three take turns
// Rounds times each so that drift hits them alike.
type IdleSet struct {
	N       int
	LockTTL time.Duration
	Settle  time.Duration
	Window  time.Duration
	Rounds  int
}

// DefaultIdleSet is what `make bench` measures: N = 1,000 at LockTTL 3s.
func DefaultIdleSet() IdleSet {
	return IdleSet{N: 1000, LockTTL: 3 * time.Second, Settle: 6 * time.Second, Window: 10 * time.Second, Rounds: 2}
}

// QuickIdleSet checks the rows work, in seconds.
func QuickIdleSet() IdleSet {
	return IdleSet{N: 20, LockTTL: 3 * time.Second, Settle: time.Second, Window: time.Second, Rounds: 1}
}

// LargeHerd is docs/tuning.md's large-herd set at cfg.LockTTL: a slave's
// one script call (check and heartbeat) every 2/3 LockTTL instead of every
// LockTTL/3, SlaveTimeout LockTTL (above 1.25 CheckInterval) and ProcessTTL
// 2 × LockTTL (above twice that). Crash failover and handover do not move;
// a dead slave is removed later (SlaveTimeout + SlaveTimeout/3).
func LargeHerd(cfg masterelection.Config) masterelection.Config {
	cfg.CheckInterval = cfg.LockTTL * 2 / 3
	cfg.SlaveTimeout = cfg.LockTTL
	cfg.ProcessTTL = 2 * cfg.LockTTL
	return cfg
}

// idleSample is one idle window of one herd.
type idleSample struct {
	cpu     float64 // Redis CPU, seconds per second, for the whole herd
	scripts float64 // EVALSHA and EVAL calls per second per process
	cmds    float64 // commands executed per second per process (scripts' included)
}

// idleRows measures set and returns rows 16a-16c.
func idleRows(ctx context.Context, env *Env, set IdleSet, progress io.Writer) []Row {
	configs := []struct {
		name string
		cfg  func(lock, id string) masterelection.Config
	}{
		{"defaults", func(lock, id string) masterelection.Config {
			return masterelection.Config{LockName: lock, NodeID: id, LockTTL: set.LockTTL}
		}},
		{"large herd", func(lock, id string) masterelection.Config {
			return LargeHerd(masterelection.Config{LockName: lock, NodeID: id, LockTTL: set.LockTTL})
		}},
	}
	samples := make([][]idleSample, len(configs)+1) // the last: the floor
	var quiet []idleSample                          // Redis with no client but the admin's
	var err error
	for r := 0; r < set.Rounds && err == nil; r++ {
		for i, c := range configs {
			fmt.Fprintf(progress, " [%s]", c.name)
			var s idleSample
			if s, err = idleHerd(ctx, env, set, c.cfg); err != nil {
				err = fmt.Errorf("%s, round %d: %w", c.name, r+1, err)
				break
			}
			samples[i] = append(samples[i], s)
		}
		if err != nil {
			break
		}
		fmt.Fprint(progress, " [floor]")
		var s, none idleSample
		if s, none, err = idleFloor(ctx, env, set); err != nil {
			err = fmt.Errorf("floor, round %d: %w", r+1, err)
			break
		}
		samples[len(configs)] = append(samples[len(configs)], s)
		quiet = append(quiet, none)
	}
	perProc := func(s idleSample) float64 { return s.cpu / float64(set.N) * 1e6 }
	mean := func(ss []idleSample, f func(idleSample) float64) float64 {
		if len(ss) == 0 {
			return 0
		}
		sum := 0.0
		for _, s := range ss {
			sum += f(s)
		}
		return sum / float64(len(ss))
	}
	list := func(ss []idleSample) string {
		out := ""
		for i, s := range ss {
			if i > 0 {
				out += ", "
			}
			out += fmt.Sprintf("%.1f", perProc(s))
		}
		return out
	}
	value := func(ss []idleSample) string {
		return fmt.Sprintf("%.1f µs/s per process (%.2f%% of a core); %.2f script calls, %.1f commands /s per process",
			mean(ss, perProc), mean(ss, func(s idleSample) float64 { return s.cpu * 100 }),
			mean(ss, func(s idleSample) float64 { return s.scripts }), mean(ss, func(s idleSample) float64 { return s.cmds }))
	}
	def, large, floor := samples[0], samples[1], samples[2]
	a := Row{ID: "16a", What: fmt.Sprintf("idle herd of %d, LockTTL %v: Redis CPU per process, the defaults (CheckInterval = HeartbeatInterval = LockTTL/3)", set.N, set.LockTTL),
		N: len(def), Value: value(def), Goal: "—", Note: "Per round: " + list(def) + " µs/s."}
	b := Row{ID: "16b", What: fmt.Sprintf("idle herd of %d, LockTTL %v: Redis CPU per process, the large-herd set (CheckInterval 2/3 LockTTL, SlaveTimeout LockTTL, ProcessTTL 2 × LockTTL)", set.N, set.LockTTL),
		N: len(large), Value: value(large), Goal: "≤ ¼ of the code before issue 36 (see the note)", Note: "Per round: " + list(large) + " µs/s."}
	c := Row{ID: "16c", What: "16b ÷ 16a", N: min(len(def), len(large)), Goal: "—"}
	if m := mean(def, perProc); m > 0 && len(large) > 0 {
		c.Value = fmt.Sprintf("%.2f", mean(large, perProc)/m)
	}
	d := Row{ID: "16d", What: fmt.Sprintf("floor under 16a: %d clients, each sending one PING per LockTTL/3 (the defaults' call rate, no script): Redis CPU per client", set.N),
		N: len(floor), Goal: "—", Note: "Per round: " + list(floor) + " µs/s."}
	if len(floor) > 0 {
		d.Value = fmt.Sprintf("%s; %.1f µs per PING; Redis with no client: %.2f%% of a core", value(floor),
			mean(floor, perProc)/mean(floor, func(s idleSample) float64 { return s.cmds }),
			mean(quiet, func(s idleSample) float64 { return s.cpu * 100 }))
	}
	e := Row{ID: "16e", What: "16a ÷ 16d", N: min(len(def), len(floor)), Goal: "—"}
	if m := mean(floor, perProc); m > 0 && len(def) > 0 {
		e.Value = fmt.Sprintf("%.2f", mean(def, perProc)/m)
	}
	a.Err, b.Err, c.Err, d.Err, e.Err = err, err, err, err, err
	return group(fmt.Sprintf("N MasterElections on one lock, each on a go-redis client of its own (no Subscriber), every Start returned, then %v to settle; Redis INFO cpu (used_cpu_sys + used_cpu_user) and commandstats deltas over %v; the two sets and the floor take turns, %d round(s) each. The code before issue 36 (CheckInterval LockTTL/6, each check carrying the heartbeat every other time) cost 83.2-102.8 µs/s per process with the same probe on this machine over two sessions (Redis 8.0.6, 2.0 script calls/s per process): ¼ of it is 21-26 µs/s. 16d: the same number of clients, each waking Redis as often as a slave at the defaults does, with the cheapest command: what calls at that rate cost Redis all told (serving them and keeping the connections) before any script runs.",
		set.Settle, set.Window, set.Rounds), []Row{a, b, c, d, e})
}

// idleHerd starts set.N elections made by cfg on a fresh lock, lets them
// settle, measures one idle window, and stops them.
func idleHerd(ctx context.Context, env *Env, set IdleSet, cfg func(lock, id string) masterelection.Config) (idleSample, error) {
	admin := env.NewClient()
	defer admin.Close()
	lock := env.LockName("idle")
	type member struct {
		c *redis.Client
		m *masterelection.MasterElection
	}
	ms := make([]member, 0, set.N)
	defer func() {
		var wg sync.WaitGroup
		for _, x := range ms {
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = x.m.Stop(sctx)
				_ = x.c.Close()
			})
		}
		wg.Wait()
	}()
	for i := range set.N {
		c := env.NewClient()
		m, err := masterelection.New(c, cfg(lock, fmt.Sprintf("n%d", i)))
		if err != nil {
			_ = c.Close()
			return idleSample{}, err
		}
		ms = append(ms, member{c, m})
	}
	errs := make(chan error, len(ms))
	for _, x := range ms {
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			errs <- x.m.Start(sctx)
		}()
	}
	var startErr error
	failed := 0
	for range ms {
		if err := <-errs; err != nil {
			failed++
			startErr = cmp.Or(startErr, err)
		}
	}
	if startErr != nil {
		return idleSample{}, fmt.Errorf("start: %d of %d failed, the first: %w", failed, len(ms), startErr)
	}
	if err := sleep(ctx, set.Settle); err != nil {
		return idleSample{}, err
	}
	return idleWindow(ctx, admin, set, set.N)
}

// idleFloor measures set.N clients, each sending one PING per LockTTL/3 (a
// slave's call rate at the defaults) from a random phase, over one window
// after set.Settle: the Redis CPU that waking Redis that often costs,
// whatever the call; and, before they start, Redis with no other client
// over one window (its own periodic work, in every row).
func idleFloor(ctx context.Context, env *Env, set IdleSet) (floor, none idleSample, err error) {
	admin := env.NewClient()
	defer admin.Close()
	if none, err = idleWindow(ctx, admin, set, 0); err != nil {
		return idleSample{}, idleSample{}, err
	}
	every := set.LockTTL / 3
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range set.N {
		c := env.NewClient()
		wg.Go(func() {
			defer c.Close()
			if err := sleep(fctx, rand.N(every)); err != nil {
				return
			}
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				_ = c.Ping(fctx).Err() // a failed PING shows as fewer commands in the sample
				select {
				case <-fctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	if err := sleep(ctx, set.Settle); err != nil {
		return idleSample{}, idleSample{}, err
	}
	floor, err = idleWindow(ctx, admin, set, set.N)
	return floor, none, err
}

// idleWindow samples Redis over set.Window: its CPU, and the script calls
// and commands (INFO's own left out) per second per process of n (per
// second when n is 0).
func idleWindow(ctx context.Context, admin redis.UniversalClient, set IdleSet, n int) (idleSample, error) {
	s0, err := snapScale(ctx, admin)
	if err != nil {
		return idleSample{}, err
	}
	if err := sleep(ctx, set.Window); err != nil {
		return idleSample{}, err
	}
	s1, err := snapScale(ctx, admin)
	if err != nil {
		return idleSample{}, err
	}
	secs := s1.at.Sub(s0.at).Seconds()
	executed := s1.cmdstats.Sub(s0.cmdstats)
	per := float64(max(n, 1))
	return idleSample{
		cpu:     (s1.cpu - s0.cpu) / secs,
		scripts: float64(executed["evalsha"]+executed["eval"]) / secs / per,
		cmds:    float64(executed.Total("info")) / secs / per,
	}, nil
}
