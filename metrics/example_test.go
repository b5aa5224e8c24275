package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/metrics"
)

// Register the metrics of an election before starting it, scrape them, and
// ask the readiness probe.
func Example() {
	mr, err := miniredis.Run() // an embedded Redis, for the example
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	cfg := masterelection.DefaultConfig()
	cfg.LockName = "billing"
	cfg.NodeID = "node-a"
	election, err := masterelection.New(client, cfg)
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	mx, err := metrics.Register(reg, election)
	if err != nil {
		panic(err)
	}
	defer mx.Unregister()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := election.Start(ctx); err != nil {
		panic(err)
	}
	defer election.Stop(ctx)

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "herd_election_is_master", "herd_election_candidate":
			m := f.GetMetric()[0]
			fmt.Printf("%s{%s=%q} %v\n", f.GetName(), m.GetLabel()[0].GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}

	rec := httptest.NewRecorder()
	metrics.Readiness(election, time.Second).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	var rep metrics.HealthReport
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		panic(err)
	}
	fmt.Println(rec.Code, rep.Status, rep.Role, rep.Master)
	// Output:
	// herd_election_candidate{lock="billing"} 1
	// herd_election_is_master{lock="billing"} 1
	// 200 ok master node-a
}
