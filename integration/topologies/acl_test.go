//go:build topologies

package topologies

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// herdCommands are the commands a herd process (election, registry,
// routing) sends, directly or from its Lua scripts: Redis checks the
// commands a script calls against the ACL of the user who runs the script.
// docs/topologies.md lists them; keep both in step.
var herdCommands = []string{
	// every script: EVALSHA, then EVAL when the server has not cached it
	"evalsha", "eval",
	// election notices, routing, reports, and keep-alive on subscribed connections
	"subscribe", "unsubscribe", "publish", "ping",
	// Start's check of the eviction policy (INFO memory)
	"info",
	// reads outside scripts: registry entries, the master's entry, the last term
	"get", "hget", "hgetall", "hmget",
	// the registry's reads with its version (the slave tracker's sweeps and
	// confirming reads), and the emulated backend's expiry script before them,
	// in one transaction
	"multi", "exec",
	// inside the scripts: the lock, the term, the heartbeat, the server clock
	"set", "del", "pexpire", "pttl", "time", "type",
	// inside the scripts: registry entries and their TTLs
	"hset", "hdel", "hexists", "hsetex", "hpexpire",
	// inside the scripts: the emulated per-entry TTL (servers without hash-field expiry)
	"zadd", "zrem", "zscore", "zrangebyscore",
}

// clusterCommands are the extra commands of a go-redis cluster client: it
// learns the slot layout with CLUSTER SLOTS, and the key positions and
// routing policies of commands with COMMAND (go-redis v9.23 retries a
// denied COMMAND on every call that needs it).
var clusterCommands = []string{"cluster|slots", "command"}

// herdACL returns the ACL SETUSER command of a least-privileged herd user
// for one lock name: only herd's commands (those the server knows), only
// the keys <lock>:* (or {<lock>}:* on Cluster), only the channels
// <lock>:* and worker:slave:*.
func herdACL(user, password, lock string, cluster bool, known func(string) bool) []any {
	prefix := keyspace.NewKeys(lock, cluster).Prefix
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password, "-@all"}
	cmds := herdCommands
	if cluster {
		cmds = append(append([]string(nil), cmds...), clusterCommands...)
	}
	for _, c := range cmds {
		if known(c) {
			args = append(args, "+"+c)
		}
	}
	return append(args, "~"+prefix+":*", "&"+prefix+":*", "&"+keyspace.DefaultSlavePrefix+"*")
}

// sentinelACL is the ACL SETUSER command of the user a go-redis failover
// client logs in to the sentinels with: it asks for the primary's address
// and the other sentinels, and listens for switch-overs.
func sentinelACL(user, password string) []any {
	return []any{"ACL", "SETUSER", user, "reset", "on", ">" + password, "-@all",
		"+sentinel|get-master-addr-by-name", "+sentinel|sentinels", "+subscribe", "+ping",
		"&+switch-master", "&+replica-reconf-done"}
}

// knownCommands reports which top-level commands of herdCommands the server
// on c has (HSETEX and HPEXPIRE are missing before Redis 8 and 7.4, and ACL
// SETUSER refuses a command it does not know).
func knownCommands(ctx context.Context, t *testing.T, c *redis.Client) func(string) bool {
	t.Helper()
	known := map[string]bool{}
	for _, name := range herdCommands {
		v, err := c.Do(ctx, "COMMAND", "INFO", name).Slice()
		if err != nil {
			t.Fatalf("COMMAND INFO %s: %v", name, err)
		}
		known[name] = len(v) == 1 && v[0] != nil
	}
	return func(name string) bool {
		k, probed := known[name]
		return k || !probed // clusterCommands exist on every server herd supports
	}
}

// sentinelAdmin returns a client of the sentinel on addr as its default
// user, closed at cleanup.
func sentinelAdmin(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestStandaloneACL runs herd as a least-privileged user on one server.
func TestStandaloneACL(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		testACL(t, onStandalone(redistest.Start(t, s)))
	})
}

// testACL creates the user of herdACL on every data node, runs an election
// with registry and routing through it (handover, a slave cut off and
// removed), and checks that the server denied nothing (ACL LOG is empty),
// that the registry picked the same backend as an unrestricted user would,
// and that the user can do nothing else.
func testACL(t *testing.T, dep deployment) {
	const lock, user, password = "acl", "herd-acl", "herd-acl-secret"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rule []any
	for _, n := range dep.dataNodes {
		admin := n.Client(t)
		if rule == nil {
			rule = herdACL(user, password, lock, dep.cluster, knownCommands(ctx, t, admin))
		}
		for _, cmd := range [][]any{rule, {"ACL", "LOG", "RESET"}, {"CONFIG", "RESETSTAT"}} {
			if err := admin.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v on %s: %v", cmd[:2], n.Addr, err)
			}
		}
	}
	t.Logf("%s: %s", dep.name, strings.Trim(fmt.Sprint(rule), "[]"))
	co := clientOpts{user: user, password: password}
	const sentinelUser, sentinelPassword = "herd-sentinel", "herd-sentinel-secret"
	for _, addr := range dep.sentinels {
		srule := sentinelACL(sentinelUser, sentinelPassword)
		for _, cmd := range [][]any{srule, {"ACL", "LOG", "RESET"}} {
			if err := sentinelAdmin(t, addr).Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v on sentinel %s: %v", cmd[:2], addr, err)
			}
		}
		co.sentinelUser, co.sentinelPassword = sentinelUser, sentinelPassword
		if addr == dep.sentinels[0] {
			t.Logf("sentinels: %s", strings.Trim(fmt.Sprint(srule), "[]"))
		}
	}

	procs := startProcsAs(t, dep, lock, 3, nil, co)
	master := waitOneMaster(t, procs, 0, 5*time.Second)
	waitRegistry(t, master, procs, 5*time.Second)
	checkRouting(t, dep, lock, master, others(procs, master), false)

	// A slave cut off: the master removes it once it is stale.
	rest := others(procs, master)
	rest[0].cut.Cut()
	waitRegistry(t, master, []*proc{master, rest[1]}, 10*time.Second)
	// The master leaves: release, unregister, take-over.
	stopProc(t, master)
	last := waitOneMaster(t, rest[1:], 0, 5*time.Second)
	waitRegistry(t, last, []*proc{last}, 5*time.Second)

	// Nothing herd did was denied, on any node.
	for _, n := range dep.dataNodes {
		entries, err := n.Client(t).Do(ctx, "ACL", "LOG").Slice()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			t.Errorf("%s denied the herd user: %v", n.Addr, e)
		}
	}

	for _, addr := range dep.sentinels {
		entries, err := sentinelAdmin(t, addr).Do(ctx, "ACL", "LOG").Slice()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			t.Errorf("sentinel %s denied the failover client: %v", addr, e)
		}
	}

	// The registry chose the backend an unrestricted user gets.
	free := dep.newClient(t, clientOpts{})
	reg, err := registry.New(ctx, free, last.el.Keys(), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := last.el.Registry().Backend(), reg.Backend(); got != want {
		t.Errorf("registry backend as the herd user: %s, as the default user: %s", got, want)
	}

	// Its own keys it may write; nothing else is allowed.
	c := last.client
	if err := c.Do(ctx, "SET", last.el.Keys().Prefix+":scratch", "v").Err(); err != nil {
		t.Errorf("SET of a key under the lock's prefix as the herd user: %v", err)
	}
	for _, cmd := range [][]any{
		{"GET", "other-key"},
		{"SET", "other-key", "v"},
		{"FLUSHALL"},
		{"KEYS", "*"},
		{"CONFIG", "GET", "maxmemory"},
		{"PUBLISH", "other-channel", "x"},
	} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the herd user: %v, want NOPERM", cmd, err)
		}
	}

	// Commands granted that this run never sent (read on one node; on a
	// cluster the other nodes saw other parts of the traffic).
	if dep.name == "standalone" {
		stats, err := dep.dataNodes[0].Client(t).Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var unused []string
		for _, a := range rule {
			s, ok := a.(string)
			if !ok || !strings.HasPrefix(s, "+") {
				continue
			}
			name := strings.ReplaceAll(s[1:], "|", "_")
			if !strings.Contains(stats, "cmdstat_"+name+":") {
				unused = append(unused, s[1:])
			}
		}
		sort.Strings(unused)
		t.Logf("granted but not used in this run (backend %s): %v", reg.Backend(), unused)
	}
}
