package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
)

// IdleSet is the idle-cost rows (16a-16c): N elections on one lock, each on
// a client of its own (no Subscriber), left Settle after every Start
// returned (the first registrations, sweeps and checks behind them), then
// idle for Window, with the library's defaults at LockTTL and with
// docs/tuning.md's large-herd set, taking turns Rounds times each so that
// drift hits both alike.
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
	samples := make([][]idleSample, len(configs))
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
	def, large := samples[0], samples[1]
	a := Row{ID: "16a", What: fmt.Sprintf("idle herd of %d, LockTTL %v: Redis CPU per process, the defaults (CheckInterval = HeartbeatInterval = LockTTL/3)", set.N, set.LockTTL),
		N: len(def), Value: value(def), Goal: "—", Note: "Per round: " + list(def) + " µs/s."}
	b := Row{ID: "16b", What: fmt.Sprintf("idle herd of %d, LockTTL %v: Redis CPU per process, the large-herd set (CheckInterval 2/3 LockTTL, SlaveTimeout LockTTL, ProcessTTL 2 × LockTTL)", set.N, set.LockTTL),
		N: len(large), Value: value(large), Goal: "≤ ¼ of the code before issue 36 (see the note)", Note: "Per round: " + list(large) + " µs/s."}
	c := Row{ID: "16c", What: "16b ÷ 16a", N: min(len(def), len(large)), Goal: "—"}
	if m := mean(def, perProc); m > 0 && len(large) > 0 {
		c.Value = fmt.Sprintf("%.2f", mean(large, perProc)/m)
	}
	a.Err, b.Err, c.Err = err, err, err
	return group(fmt.Sprintf("N MasterElections on one lock, each on a go-redis client of its own (no Subscriber), every Start returned, then %v to settle; Redis INFO cpu (used_cpu_sys + used_cpu_user) and commandstats deltas over %v; the two sets take turns, %d round(s) each. The code before issue 36 (CheckInterval LockTTL/6, each check carrying the heartbeat every other time) cost 98.0 and 102.8 µs/s per process with the same probe on this machine (Redis 8.0.6, 1.98 script calls/s per process): ¼ of it is about 25 µs/s.",
		set.Settle, set.Window, set.Rounds), []Row{a, b, c})
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
	n := float64(set.N)
	return idleSample{
		cpu:     (s1.cpu - s0.cpu) / secs,
		scripts: float64(executed["evalsha"]+executed["eval"]) / secs / n,
		cmds:    float64(executed.Total("info")) / secs / n,
	}, nil
}
