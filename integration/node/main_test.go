package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/integration/internal/faults"
	"github.com/herdkit/herd/masterelection"
)

// TestStartsFirstCallIsRecordedAsAcquireRegister: the node's client hook
// records the call by which Start takes the lock (Start's questions fused
// with its first acquire and registration) as faults.AcquireRegister,
// whether go-redis sends it as EVALSHA or as EVAL: on a server that does
// not have the script yet, the EVALSHA is answered NOSCRIPT and go-redis
// sends the source, and both leave the process. The oracle excuses a lost
// acquire's master entry only by such a record.
func TestStartsFirstCallIsRecordedAsAcquireRegister(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	var buf bytes.Buffer
	c.AddHook(&hook{out: &recorder{w: &buf, proc: "n1.1", node: "n1"}})
	m, err := masterelection.New(c, masterelection.Config{LockName: "label", NodeID: "n1", LockTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.IsMaster() {
		t.Fatal("Start returned without the lock on an empty server")
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r faults.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		if r.Kind == faults.KindLockCall {
			calls = append(calls, r.Detail)
		}
	}
	if len(calls) < 2 || calls[0] != faults.AcquireRegister || calls[1] != faults.AcquireRegister {
		t.Fatalf("lock calls recorded %q; want Start's first as %q twice (EVALSHA, then EVAL after NOSCRIPT)", calls, faults.AcquireRegister)
	}
}
