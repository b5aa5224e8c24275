package metrics_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/metrics"
)

// waitLimit bounds every wait in these tests: it turns a hang into a
// failure and is never asserted as a timing.
const waitLimit = 20 * time.Second

// testLock is the lock name of the tests' elections.
const testLock = "metrics-test"

func clientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaxRetries:               -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// newMini starts a miniredis and returns it with a client of it; both are
// closed by t.Cleanup.
func newMini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	return mr, newClient(t, mr.Addr())
}

func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(clientOptions(addr))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fastConfig has timings short enough for several masterships per test.
func fastConfig(id string) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = testLock
	cfg.NodeID = id
	cfg.Identifier = id
	cfg.LockTTL = time.Second
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.CheckInterval = 100 * time.Millisecond
	cfg.ElectionJitter = 20 * time.Millisecond
	cfg.SlaveTimeout = 2 * time.Second
	cfg.ProcessTTL = 3 * time.Second
	return cfg
}

// newElection returns an election that t.Cleanup stops.
func newElection(t testing.TB, c redis.UniversalClient, cfg masterelection.Config) *masterelection.MasterElection {
	t.Helper()
	e, err := masterelection.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, e) })
	return e
}

func start(t testing.TB, e *masterelection.MasterElection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", e.NodeID(), err)
	}
}

func stop(t testing.TB, e *masterelection.MasterElection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Errorf("stop %s: %v", e.NodeID(), err)
	}
}

// register registers e's metrics (with opts) in a registry of their own.
func register(t testing.TB, e *masterelection.MasterElection, opts ...metrics.Option) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	mx, err := metrics.Register(reg, e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mx.Unregister)
	return reg
}

// scrape gathers g as a scrape does and returns every sample by
// name{label="value",…}, without the lock label, labels in name order.
// Histograms give name_count and name_sum.
func scrape(t testing.TB, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() != metrics.LockLabel {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
			}
			key := func(suffix string) string {
				if len(labels) == 0 {
					return f.GetName() + suffix
				}
				return f.GetName() + suffix + "{" + strings.Join(labels, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key("_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key("_sum")] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// waitFor waits until cond holds for a scrape of g, and fails the test
// with the scrape when it does not within waitLimit.
func waitFor(t testing.TB, g prometheus.Gatherer, what string, cond func(s map[string]float64) bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		s := scrape(t, g)
		if cond(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; scrape:\n%s", what, waitLimit, dump(s))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitValues waits until every sample of want has its value.
func waitValues(t testing.TB, g prometheus.Gatherer, want map[string]float64) {
	t.Helper()
	waitFor(t, g, fmt.Sprintf("samples %v", want), func(s map[string]float64) bool {
		for k, v := range want {
			if got, ok := s[k]; !ok || got != v {
				return false
			}
		}
		return true
	})
}

// atLeast waits until the sample name has at least min.
func atLeast(t testing.TB, g prometheus.Gatherer, name string, min float64) {
	t.Helper()
	waitFor(t, g, fmt.Sprintf("%s >= %v", name, min), func(s map[string]float64) bool { return s[name] >= min })
}

func dump(s map[string]float64) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %v\n", k, s[k])
	}
	return b.String()
}
