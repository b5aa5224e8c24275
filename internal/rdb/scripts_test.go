package rdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func setup(t *testing.T) (*miniredis.Miniredis, *redis.Client, keyspace.Keys) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(now)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return mr, c, keyspace.NewKeys("svc", false)
}

func TestAcquireContract(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	sub := c.Subscribe(ctx, k.Events)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	got, err := rdb.Acquire(ctx, c, k, "n1", 5*time.Second, []byte(`{"processId":"n1","role":"master"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Term != now.UnixMilli() {
		t.Fatalf("first term %d, want server time in ms %d", got.Term, now.UnixMilli())
	}
	if v, _ := mr.Get(k.Master); v != "n1" || mr.TTL(k.Master) != 5*time.Second {
		t.Fatalf("lock %q ttl %v", v, mr.TTL(k.Master))
	}
	if v, _ := mr.Get(k.Heartbeat); v != "1772600767000" {
		t.Fatalf("heartbeat %q, want server time in ms", v)
	}
	var info map[string]any
	raw, _ := mr.Get(k.MasterProcess)
	if err := json.Unmarshal([]byte(raw), &info); err != nil || info["term"] != float64(got.Term) || info["role"] != "master" {
		t.Fatalf("master_process %q (%v)", raw, err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n struct {
		Event, NodeID string
		Term          int64
	}
	if err := json.Unmarshal([]byte(msg.Payload), &n); err != nil || n.Event != "acquired" || n.NodeID != "n1" || n.Term != got.Term {
		t.Fatalf("notice %q", msg.Payload)
	}

	// Held: a second candidate learns who holds it and for how long.
	other, err := rdb.Acquire(ctx, c, k, "n2", 5*time.Second, nil, 0)
	if err != nil || other.Term != 0 || other.Holder != "n1" || other.TTL != 5*time.Second || other.HolderTerm != got.Term {
		t.Fatalf("second acquire = %+v, %v", other, err)
	}

	// Terms grow by one while the term key lives, even at the same instant.
	if ok, _ := rdb.Release(ctx, c, k, "n1", got.Term); !ok {
		t.Fatal("release refused")
	}
	again, err := rdb.Acquire(ctx, c, k, "n2", 5*time.Second, nil, 0)
	if err != nil || again.Term != got.Term+1 {
		t.Fatalf("re-acquire = %+v, %v; want term %d", again, err, got.Term+1)
	}
	if mr.Exists(k.MasterProcess) {
		t.Fatalf("master_process written for empty info")
	}
}

func TestTermSurvivesDataLoss(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	first, err := rdb.Acquire(ctx, c, k, "n1", time.Second, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	mr.FlushAll() // a restart without persistence
	mr.SetTime(now.Add(time.Millisecond))
	second, err := rdb.Acquire(ctx, c, k, "n2", time.Second, nil, 0)
	if err != nil || second.Term <= first.Term {
		t.Fatalf("term after data loss %d, before %d (%v)", second.Term, first.Term, err)
	}
}

func TestRenewContract(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	a, _ := rdb.Acquire(ctx, c, k, "n1", time.Second, []byte(`{"processId":"n1"}`), 0)
	mr.FastForward(500 * time.Millisecond)

	for _, tc := range []struct {
		name string
		node string
		term int64
		want bool
	}{
		{"other node", "n2", 0, false},
		{"stale term", "n1", a.Term - 1, false},
		{"node only", "n1", 0, true},
		{"node and term", "n1", a.Term, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := rdb.Renew(ctx, c, k, tc.node, tc.term, 3*time.Second)
			if err != nil || ok != tc.want {
				t.Fatalf("renew = %v, %v; want %v", ok, err, tc.want)
			}
		})
	}
	for _, key := range []string{k.Master, k.Heartbeat, k.MasterProcess} {
		if ttl := mr.TTL(key); ttl != 3*time.Second {
			t.Errorf("%s ttl %v after renew, want 3s", key, ttl)
		}
	}
	mr.HSet("svc:master2", "x", "y")
	bad := k
	bad.Master = "svc:master2"
	if ok, err := rdb.Renew(ctx, c, bad, "n1", 0, time.Second); ok || err != nil {
		t.Fatalf("renew over a hash lock = %v, %v; want a plain refusal", ok, err)
	}
}

func TestReleaseContract(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	a, _ := rdb.Acquire(ctx, c, k, "n1", time.Second, []byte(`{"processId":"n1"}`), 0)
	if ok, err := rdb.Release(ctx, c, k, "n2", 0); ok || err != nil {
		t.Fatalf("release by another node = %v, %v", ok, err)
	}
	if ok, err := rdb.Release(ctx, c, k, "n1", a.Term+1); ok || err != nil {
		t.Fatalf("release with another term = %v, %v", ok, err)
	}
	if !mr.Exists(k.Master) {
		t.Fatal("a refused release deleted the lock")
	}
	if ok, err := rdb.Release(ctx, c, k, "n1", a.Term); !ok || err != nil {
		t.Fatalf("release by the holder = %v, %v", ok, err)
	}
	for _, key := range []string{k.Master, k.Heartbeat, k.MasterProcess} {
		if mr.Exists(key) {
			t.Errorf("%s survives release", key)
		}
	}
	if v, _ := mr.Get(k.Term); v == "" {
		t.Error("release deleted the term key; terms must survive")
	}
}

// checkBoth runs the check script alone (Check) and queued in a pipeline
// (QueueCheck), and fails when the two answers differ.
func checkBoth(t *testing.T, c *redis.Client, k keyspace.Keys) (rdb.MasterState, error) {
	t.Helper()
	ctx := context.Background()
	st, err := rdb.Check(ctx, c, k)
	var call *rdb.CheckCall
	if _, perr := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		call = rdb.QueueCheck(ctx, p, k)
		return nil
	}); perr != nil {
		t.Fatalf("pipeline: %v", perr)
	}
	qst, qerr := call.Result()
	if !reflect.DeepEqual(st, qst) || (err == nil) != (qerr == nil) {
		t.Fatalf("Check = %+v, %v; QueueCheck = %+v, %v", st, err, qst, qerr)
	}
	return st, err
}

func TestCheckContract(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	st, err := checkBoth(t, c, k)
	if err != nil || st.Exists || !st.TermMissing {
		t.Fatalf("check on a new lock name = %+v, %v", st, err)
	}
	a, _ := rdb.Acquire(ctx, c, k, "n1", 2*time.Second, nil, 0)
	if ok, _ := rdb.Release(ctx, c, k, "n1", a.Term); !ok {
		t.Fatal("release refused")
	}
	if st, err = checkBoth(t, c, k); err != nil || st.Exists || st.TermMissing {
		t.Fatalf("check after a release = %+v, %v; the term key must remain", st, err)
	}
	a, _ = rdb.Acquire(ctx, c, k, "n1", 2*time.Second, nil, 0)
	mr.FastForward(500 * time.Millisecond)
	st, err = checkBoth(t, c, k)
	if err != nil || !st.Exists || st.NodeID != "n1" || st.Term != a.Term || st.TTL != 1500*time.Millisecond || st.Garbage != "" || st.TermMissing {
		t.Fatalf("check = %+v, %v", st, err)
	}
	mr.Set(k.Term, "banana")
	if st, _ = checkBoth(t, c, k); !strings.Contains(st.Garbage, "banana") {
		t.Fatalf("garbage term not reported: %+v", st)
	}
	mr.Del(k.Master)
	mr.HSet(k.Master, "a", "b")
	if st, _ = checkBoth(t, c, k); st.NodeID != "" || !strings.Contains(st.Garbage, k.Master) {
		t.Fatalf("garbage lock not reported: %+v", st)
	}
}

func TestAcquireRejectsNonObjectInfo(t *testing.T) {
	_, c, k := setup(t)
	if _, err := rdb.Acquire(context.Background(), c, k, "n1", time.Second, []byte(`[1]`), 0); err == nil {
		t.Fatal("acquire accepted a JSON array as process info")
	}
}

func TestRedisErrorsAreWrapped(t *testing.T) {
	for _, refusal := range []string{
		"NOPERM this user has no permissions to run the 'evalsha' command",                                               // outside scripts
		"ERR The user executing the script can't run this command or subcommand script: 3c10, on @user_script:1.",        // Redis 7.0
		"ERR ACL failure in script: User u has no permissions to run the 'get' command script: 3c10, on @user_script:1.", // Redis 8, Valkey 9
	} {
		mr, c, k := setup(t)
		mr.SetError(refusal)
		_, err := rdb.Check(context.Background(), c, k)
		if err == nil || !strings.Contains(err.Error(), "check script") || errors.Is(err, redis.Nil) {
			t.Fatalf("error = %v", err)
		}
		if !strings.Contains(err.Error(), "GET, PTTL") {
			t.Errorf("ACL refusal %q does not name the commands the script needs", err)
		}
	}
}

func TestRouteContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	sub := c.Subscribe(ctx, "worker:slave:s1")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := rdb.Acquire(ctx, c, k, "n1", time.Second, nil, 0)

	counts, err := rdb.Route(ctx, c, k, "n1", a.Term, []byte(`{"m":1}`), "worker:slave:s1", "worker:slave:nobody")
	if err != nil || len(counts) != 2 || counts[0] != 1 || counts[1] != 0 {
		t.Fatalf("route by the holder = %v, %v", counts, err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != `{"m":1}` {
		t.Fatalf("received %v, %v", msg, err)
	}
	for _, tc := range []struct {
		name string
		node string
		term int64
	}{
		{"other node", "n2", a.Term},
		{"older term", "n1", a.Term - 1},
		{"no term", "n1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rdb.Route(ctx, c, k, tc.node, tc.term, []byte(`{}`), "worker:slave:s1"); !errors.Is(err, keyspace.ErrFenced) {
				t.Fatalf("route = %v, want ErrFenced", err)
			}
		})
	}
}

func TestRouteBatchContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	sub := c.Subscribe(ctx, "worker:slave:s1", "worker:slave:s2")
	defer sub.Close()
	for range 2 {
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := rdb.Acquire(ctx, c, k, "n1", time.Second, nil, 0)

	msgs := []rdb.Routed{
		{Channel: "worker:slave:s1", Message: []byte(`{"m":1}`)},
		{Channel: "worker:slave:nobody", Message: []byte(`{"m":2}`)},
		{Channel: "worker:slave:s2", Message: []byte(`{"m":3}`)},
		{Channel: "worker:slave:s1", Message: []byte(`{"m":4}`)},
	}
	counts, err := rdb.RouteBatch(ctx, c, k, "n1", a.Term, msgs)
	if err != nil || len(counts) != 4 || counts[0] != 1 || counts[1] != 0 || counts[2] != 1 || counts[3] != 1 {
		t.Fatalf("route batch by the holder = %v, %v", counts, err)
	}
	// One subscription on both channels: it sees the PUBLISH order.
	for _, want := range []string{`{"m":1}`, `{"m":3}`, `{"m":4}`} {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || msg.Payload != want {
			t.Fatalf("received %v, %v; want %s", msg, err, want)
		}
	}

	if counts, err := rdb.RouteBatch(ctx, c, k, "n1", a.Term, nil); counts != nil || err != nil {
		t.Errorf("empty batch = %v, %v; want no call", counts, err)
	}
	for _, tc := range []struct {
		name string
		node string
		term int64
	}{
		{"other node", "n2", a.Term},
		{"older term", "n1", a.Term - 1},
		{"no term", "n1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rdb.RouteBatch(ctx, c, k, tc.node, tc.term, msgs)
			if !errors.Is(err, keyspace.ErrFenced) || !strings.Contains(err.Error(), "4 messages") {
				t.Fatalf("route batch = %v, want ErrFenced naming the batch size", err)
			}
		})
	}
	// Fenced calls published nothing: the next message is a marker.
	if err := c.Publish(ctx, "worker:slave:s1", "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Payload != "marker" {
		t.Fatalf("after fenced batches received %v, %v; want the marker", msg, err)
	}

	// The script refuses arguments that are not channel, message pairs.
	err = rdb.RouteBatchScript.Run(ctx, c, []string{k.Master, k.Term}, "n1", a.Term, "worker:slave:s1").Err()
	if err == nil || !strings.Contains(err.Error(), "pairs") {
		t.Errorf("odd arguments: %v, want an error about pairs", err)
	}
}

func TestReplicatedWritesReportAcks(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	mr.FlushAll()
	_ = c.ScriptFlush(ctx).Err() // the first call must load the script by EVAL
	r := rdb.Replication{Replicas: 1, Timeout: 5 * time.Millisecond}
	a, acked, err := rdb.AcquireReplicated(ctx, c, k, "n1", time.Second, nil, 0, r)
	if err != nil || a.Term == 0 || acked != 0 {
		t.Fatalf("acquire on a server without replicas = %+v, acked %d, %v", a, acked, err)
	}
	ok, acked, err := rdb.RenewReplicated(ctx, c, k, "n1", a.Term, time.Second, r)
	if err != nil || !ok || acked != 0 {
		t.Fatalf("renew = %v, acked %d, %v", ok, acked, err)
	}
	ok, _, err = rdb.RenewReplicated(ctx, c, k, "n2", 0, time.Second, r)
	if err != nil || ok {
		t.Fatalf("renew by another node = %v, %v", ok, err)
	}
}

// TestAcquireRefusesBehindSeenTerm: with the lock free, acquire writes
// nothing while the term key is missing, garbage or below the caller's seen
// term, and takes the lock with seen 0 (the caller has waited out the loss).
func TestAcquireRefusesBehindSeenTerm(t *testing.T) {
	mr, c, k := setup(t)
	ctx := context.Background()
	a, err := rdb.Acquire(ctx, c, k, "n1", time.Second, nil, 0)
	if err != nil || a.Term == 0 {
		t.Fatalf("first acquire = %+v, %v", a, err)
	}
	if ok, _ := rdb.Release(ctx, c, k, "n1", a.Term); !ok {
		t.Fatal("release refused")
	}
	// Not behind: the term key holds the seen term.
	b, err := rdb.Acquire(ctx, c, k, "n2", time.Second, nil, a.Term)
	if err != nil || b.Term <= a.Term || b.DataLoss {
		t.Fatalf("acquire with the seen term = %+v, %v", b, err)
	}
	if ok, _ := rdb.Release(ctx, c, k, "n2", b.Term); !ok {
		t.Fatal("release refused")
	}
	for _, tc := range []struct {
		name     string
		prepare  func()
		wantTerm int64
	}{
		{"term key missing", func() { mr.Del(k.Term) }, 0},
		{"term key behind", func() { mr.Set(k.Term, "5") }, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare()
			got, err := rdb.Acquire(ctx, c, k, "n3", time.Second, []byte(`{"processId":"n3"}`), b.Term)
			if err != nil || !got.DataLoss || got.Term != 0 || got.HolderTerm != tc.wantTerm {
				t.Fatalf("acquire = %+v, %v; want DataLoss with term %d", got, err, tc.wantTerm)
			}
			for _, key := range []string{k.Master, k.Heartbeat, k.MasterProcess} {
				if mr.Exists(key) {
					t.Fatalf("acquire wrote %s although it answered DataLoss", key)
				}
			}
		})
	}
	// A held lock is reported as held, loss or not.
	mr.Del(k.Term)
	mr.Set(k.Master, "n9")
	mr.SetTTL(k.Master, time.Second)
	if got, err := rdb.Acquire(ctx, c, k, "n3", time.Second, nil, b.Term); err != nil || got.DataLoss || got.Holder != "n9" {
		t.Fatalf("acquire of a held lock = %+v, %v", got, err)
	}
	mr.Del(k.Master)
	// Seen 0: the caller waited; the term goes on from the server's clock.
	got, err := rdb.Acquire(ctx, c, k, "n3", time.Second, nil, 0)
	if err != nil || got.DataLoss || got.Term < now.UnixMilli() {
		t.Fatalf("acquire after the wait = %+v, %v", got, err)
	}
}

// TestSplitMasterProcess: the value acquire.lua stores splits back into the
// info the candidate sent and the term; other forms are refused.
func TestSplitMasterProcess(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	info := []byte(`{"processId":"n1","metadata":{"term":"x"}}`)
	a, err := rdb.Acquire(ctx, c, k, "n1", time.Second, info, 0)
	if err != nil || a.Term == 0 {
		t.Fatalf("acquire = %+v, %v", a, err)
	}
	raw, err := c.Get(ctx, k.MasterProcess).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	got, term, ok := rdb.SplitMasterProcess(raw)
	if !ok || term != a.Term || string(got) != string(info) {
		t.Fatalf("split %s = %s, %d, %v; want %s, %d", raw, got, term, ok, info, a.Term)
	}
	for _, bad := range []string{``, `{}`, `{"term":5}`, `{"a":1,"term":}`, `{"a":1,"term":-5}`, `{"a":1,"term":+5}`, `{"a":1,"term":5`, `{"a":1,"term":5x}`} {
		if _, _, ok := rdb.SplitMasterProcess([]byte(bad)); ok {
			t.Errorf("split accepted %q", bad)
		}
	}
}

// TestAcquireRefusesAGarbageTerm: a term key that holds something herd
// never writes is someone else's data: acquire writes nothing and names the
// key, and so does check.
func TestAcquireRefusesAGarbageTerm(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		prepare    func(*miniredis.Miniredis, keyspace.Keys)
	}{
		{"string", `"banana"`, func(mr *miniredis.Miniredis, k keyspace.Keys) { mr.Set(k.Term, "banana") }},
		{"hash", "a hash", func(mr *miniredis.Miniredis, k keyspace.Keys) { mr.HSet(k.Term, "a", "b") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr, c, k := setup(t)
			ctx := context.Background()
			tc.prepare(mr, k)
			got, err := rdb.Acquire(ctx, c, k, "n1", time.Second, nil, 0)
			if err != nil || !got.TermGarbage || got.Term != 0 || !strings.Contains(got.Garbage, k.Term) || !strings.Contains(got.Garbage, tc.want) {
				t.Fatalf("acquire over a garbage term = %+v, %v", got, err)
			}
			if mr.Exists(k.Master) {
				t.Fatal("acquire took the lock over a garbage term")
			}
			st, err := rdb.Check(ctx, c, k)
			if err != nil || !st.TermGarbage || st.TermMissing || !strings.Contains(st.Garbage, tc.want) {
				t.Fatalf("check = %+v, %v", st, err)
			}
		})
	}
}
