package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// ClusterNodeTimeout is the cluster-node-timeout of the nodes StartCluster
// starts: how long a node may be unreachable before the others flag it
// failing and one of its replicas (if any) is promoted.
const ClusterNodeTimeout = 2 * time.Second

// clusterReadyTimeout bounds the wait for a new cluster to agree on its
// layout, and the default wait of WaitHealthy.
const clusterReadyTimeout = 30 * time.Second

// Cluster is a Redis Cluster built from one server executable by
// StartCluster: every node on 127.0.0.1, in its own directory, without
// persistence. It is safe for concurrent use; the Instances are those of
// Start and have the same control methods (Kill, Pause, ...). Restart on a
// node wipes its nodes.conf along with its data: the node comes back as an
// empty node outside the cluster.
type Cluster struct {
	// Server is the executable every node runs.
	Server Server
	// Masters are the nodes given slots when the cluster was built, in slot
	// order: Masters[i] was given SlotRange(len(Masters), i). After a
	// failover a master may have become a replica; ask NodeForSlot.
	Masters []*Instance
	// Replicas[i] are the nodes started as replicas of Masters[i]; empty
	// for StartCluster.
	Replicas [][]*Instance
}

// StartCluster starts masters nodes of s in cluster mode, joins them into
// one cluster from Go (CLUSTER MEET, CLUSTER ADDSLOTSRANGE; redis-cli is not
// needed), splits the 16384 slots evenly between them and returns once every
// node reports cluster_state:ok and knows every other node. masters must be
// at least 1; three is the smallest layout Redis calls a cluster. Every node
// is stopped by the t.Cleanup of Start. The test fails if the server cannot
// run in cluster mode or the cluster does not form within 30s.
func StartCluster(t testing.TB, s Server, masters int) *Cluster {
	t.Helper()
	return StartClusterReplicas(t, s, masters, 0)
}

// StartClusterReplicas is StartCluster with replicas nodes replicating each
// master (CLUSTER REPLICATE). It returns once, in addition, every replica's
// link to its master is up, so killing a master leads to a failover after
// about ClusterNodeTimeout.
func StartClusterReplicas(t testing.TB, s Server, masters, replicas int) *Cluster {
	t.Helper()
	if masters < 1 || masters > ClusterSlots {
		t.Fatalf("redistest: StartCluster: masters must be between 1 and %d, got %d", ClusterSlots, masters)
	}
	if replicas < 0 {
		t.Fatalf("redistest: StartCluster: replicas must not be negative, got %d", replicas)
	}
	c := &Cluster{Server: s, Replicas: make([][]*Instance, masters)}
	var all []*Instance
	for range masters {
		n := startClusterNode(t, s)
		c.Masters = append(c.Masters, n)
		all = append(all, n)
	}
	for i := range masters {
		for range replicas {
			n := startClusterNode(t, s)
			c.Replicas[i] = append(c.Replicas[i], n)
			all = append(all, n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := c.form(ctx, all); err != nil {
		t.Fatalf("redistest: StartCluster on %s: %v%s", s.Name, err, outputs(all))
	}
	return c
}

// startClusterNode starts one node in cluster mode with a cluster bus port
// of its own, chosen afresh when the first choice turns out taken.
func startClusterNode(t testing.TB, s Server) *Instance {
	t.Helper()
	return startWithArgs(t, s, func() ([]string, error) {
		bus, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		return []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to the node's own Dir
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
			// Replicas start their full sync at once instead of after 5s.
			"--repl-diskless-sync-delay", "0",
		}, nil
	})
}

// form joins the nodes into one cluster, gives the masters their slots,
// attaches the replicas, and waits until all of them agree.
func (c *Cluster) form(ctx context.Context, all []*Instance) error {
	first := adminClient(all[0].Addr)
	defer first.Close()
	for _, n := range all[1:] {
		bus, err := clusterBusPort(ctx, n)
		if err != nil {
			return err
		}
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port, bus).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s from %s: %w", n.Addr, all[0].Addr, err)
		}
	}
	for i, m := range c.Masters {
		lo, hi := SlotRange(len(c.Masters), i)
		if err := adminDo(ctx, m.Addr, "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, m.Addr, err)
		}
	}
	if err := waitClusterOK(ctx, all, len(all)); err != nil {
		return err
	}
	if len(all) == len(c.Masters) {
		return nil
	}
	for i, m := range c.Masters {
		id, err := nodeID(ctx, m.Addr)
		if err != nil {
			return err
		}
		for _, r := range c.Replicas[i] {
			// The replica must have learnt of its master through gossip first;
			// waitClusterOK above made sure every node knows every node.
			if err := adminDo(ctx, r.Addr, "CLUSTER", "REPLICATE", id); err != nil {
				return fmt.Errorf("CLUSTER REPLICATE %s on %s: %w", id, r.Addr, err)
			}
		}
	}
	for _, rs := range c.Replicas {
		for _, r := range rs {
			if err := waitLinkUp(ctx, r.Addr); err != nil {
				return err
			}
		}
	}
	// Every node must see the replicas as such before a client asks for the layout.
	return waitClusterView(ctx, all, len(c.Masters), len(all)-len(c.Masters))
}

// SlotRange returns the first and last slot StartCluster gives to master i
// of n: the 16384 slots split into n contiguous ranges.
func SlotRange(n, i int) (first, last int) {
	return i * ClusterSlots / n, (i+1)*ClusterSlots/n - 1
}

// Addrs returns the address of every node, masters first.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.nodes() {
		out = append(out, n.Addr)
	}
	return out
}

func (c *Cluster) nodes() []*Instance {
	out := append([]*Instance(nil), c.Masters...)
	for _, rs := range c.Replicas {
		out = append(out, rs...)
	}
	return out
}

// ClusterStateReload is the ClusterStateReloadInterval of the clients made
// by Cluster.Options. go-redis reloads its slot map on MOVED and ASK
// replies, but not when the master of a slot stops answering: with its
// default of 60s a client keeps dialling a dead master for up to a minute
// after a replica took over its slots.
const ClusterStateReload = time.Second

// Options returns fresh cluster client options for the cluster, with every
// node as a seed and the same settings as Instance.Options
// (ContextTimeoutEnabled, 2s timeouts, no CLIENT SETINFO, no maintenance
// notifications), and ClusterStateReloadInterval set to ClusterStateReload.
// The caller owns and closes the client.
func (c *Cluster) Options() *redis.ClusterOptions {
	o := universalOptions(c.Addrs()...).Cluster()
	o.ClusterStateReloadInterval = ClusterStateReload
	return o
}

// Client returns a new cluster client built from Options, closed by a
// t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NodeForSlot returns the node that serves slot now, as CLUSTER SLOTS on the
// first live node answers. It fails the test if no live node answers or the
// answer names an address that is not one of the cluster's nodes.
func (c *Cluster) NodeForSlot(t testing.TB, slot int) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lastErr error
	for _, n := range c.nodes() {
		if n.Pid() == 0 {
			continue
		}
		addr, err := slotOwner(ctx, n.Addr, slot)
		if err != nil {
			lastErr = err
			continue
		}
		for _, m := range c.nodes() {
			if m.Addr == addr {
				return m
			}
		}
		t.Fatalf("redistest: slot %d is served by %s, which is not a node of this cluster", slot, addr)
	}
	t.Fatalf("redistest: no live node told who serves slot %d: %v", slot, lastErr)
	return nil
}

// WaitHealthy waits until every live node reports cluster_state:ok with
// every slot served, and names only live nodes as the masters of the slots,
// within timeout (30s when 0). It fails the test otherwise. Use it after
// killing a master with replicas: it returns once a replica of the dead
// master has been promoted and every live node agrees.
func (c *Cluster) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	if timeout <= 0 {
		timeout = clusterReadyTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	live := map[string]bool{}
	var nodes []*Instance
	for _, n := range c.nodes() {
		if n.Pid() != 0 {
			live[n.Addr] = true
			nodes = append(nodes, n)
		}
	}
	if err := waitClusterHealthy(ctx, nodes, live); err != nil {
		t.Fatalf("redistest: cluster on %s not healthy: %v", c.Server.Name, err)
	}
}

// adminClient is a client for one-shot control commands: no retries, one
// connection, the usual timeouts.
func adminClient(addr string) *redis.Client {
	o := clientOptions(addr)
	o.MaxRetries = -1
	o.PoolSize = 1
	return redis.NewClient(o)
}

func adminDo(ctx context.Context, addr string, args ...any) error {
	c := adminClient(addr)
	defer c.Close()
	return c.Do(ctx, args...).Err()
}

func adminText(ctx context.Context, addr string, args ...any) (string, error) {
	c := adminClient(addr)
	defer c.Close()
	return c.Do(ctx, args...).Text()
}

// clusterBusPort reads the cluster bus port a node was started with.
func clusterBusPort(ctx context.Context, n *Instance) (int, error) {
	c := adminClient(n.Addr)
	defer c.Close()
	m, err := c.ConfigGet(ctx, "cluster-port").Result()
	if err != nil {
		return 0, fmt.Errorf("CONFIG GET cluster-port on %s: %w", n.Addr, err)
	}
	p, err := strconv.Atoi(m["cluster-port"])
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("CONFIG GET cluster-port on %s: unexpected %q", n.Addr, m["cluster-port"])
	}
	return p, nil
}

func nodeID(ctx context.Context, addr string) (string, error) {
	id, err := adminText(ctx, addr, "CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("CLUSTER MYID on %s: %w", addr, err)
	}
	return id, nil
}

// clusterInfo returns the fields of CLUSTER INFO on addr.
func clusterInfo(ctx context.Context, addr string) (map[string]string, error) {
	s, err := adminText(ctx, addr, "CLUSTER", "INFO")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER INFO on %s: %w", addr, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// poll calls check every 20ms until it returns nil or ctx ends; then it
// returns check's last error.
func poll(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (still so when %w)", err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitClusterOK waits until every node reports cluster_state:ok, all slots
// assigned, and known nodes.
func waitClusterOK(ctx context.Context, nodes []*Instance, known int) error {
	return poll(ctx, func() error {
		for _, n := range nodes {
			m, err := clusterInfo(ctx, n.Addr)
			if err != nil {
				return err
			}
			if m["cluster_state"] != "ok" || m["cluster_slots_assigned"] != strconv.Itoa(ClusterSlots) ||
				m["cluster_known_nodes"] != strconv.Itoa(known) {
				return fmt.Errorf("%s: cluster_state=%s slots_assigned=%s known_nodes=%s (want ok, %d, %d)",
					n.Addr, m["cluster_state"], m["cluster_slots_assigned"], m["cluster_known_nodes"], ClusterSlots, known)
			}
		}
		return nil
	})
}

// waitClusterHealthy waits until every node reports cluster_state:ok with
// every slot served (cluster_slots_ok), and CLUSTER SLOTS names only live
// addresses as masters.
func waitClusterHealthy(ctx context.Context, nodes []*Instance, live map[string]bool) error {
	return poll(ctx, func() error {
		for _, n := range nodes {
			m, err := clusterInfo(ctx, n.Addr)
			if err != nil {
				return err
			}
			if m["cluster_state"] != "ok" || m["cluster_slots_ok"] != strconv.Itoa(ClusterSlots) {
				return fmt.Errorf("%s: cluster_state=%s slots_ok=%s (want ok, %d)",
					n.Addr, m["cluster_state"], m["cluster_slots_ok"], ClusterSlots)
			}
			c := adminClient(n.Addr)
			ranges, err := c.ClusterSlots(ctx).Result()
			_ = c.Close()
			if err != nil {
				return fmt.Errorf("CLUSTER SLOTS on %s: %w", n.Addr, err)
			}
			for _, r := range ranges {
				if len(r.Nodes) == 0 || !live[r.Nodes[0].Addr] {
					return fmt.Errorf("%s: slots %d-%d served by %v, not a live node", n.Addr, r.Start, r.End, r.Nodes)
				}
			}
		}
		return nil
	})
}

// waitClusterView waits until every node lists masters masters and
// replicas replicas in CLUSTER NODES, none of them flagged failing.
func waitClusterView(ctx context.Context, nodes []*Instance, masters, replicas int) error {
	return poll(ctx, func() error {
		for _, n := range nodes {
			s, err := adminText(ctx, n.Addr, "CLUSTER", "NODES")
			if err != nil {
				return fmt.Errorf("CLUSTER NODES on %s: %w", n.Addr, err)
			}
			var gotM, gotR int
			for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
				f := strings.Fields(line)
				if len(f) < 8 {
					continue
				}
				flags := "," + f[2] + ","
				switch {
				case strings.Contains(flags, ",fail") || strings.Contains(flags, ",handshake,") || strings.Contains(flags, ",noaddr,"):
					return fmt.Errorf("%s sees node %s with flags %s", n.Addr, f[1], f[2])
				case strings.Contains(flags, ",master,"):
					gotM++
				case strings.Contains(flags, ",slave,") || strings.Contains(flags, ",replica,"):
					gotR++
				}
			}
			if gotM != masters || gotR != replicas {
				return fmt.Errorf("%s sees %d masters and %d replicas, want %d and %d", n.Addr, gotM, gotR, masters, replicas)
			}
		}
		return nil
	})
}

// waitLinkUp waits until the replica on addr reports master_link_status:up.
func waitLinkUp(ctx context.Context, addr string) error {
	return poll(ctx, func() error {
		s, err := adminText(ctx, addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", addr, err)
		}
		if v, _ := InfoField(s, "master_link_status"); v != "up" {
			return fmt.Errorf("replica %s: master_link_status=%q", addr, v)
		}
		return nil
	})
}

// slotOwner asks the node on addr which address serves slot, from CLUSTER
// SLOTS: [[first, last, [ip, port, id, ...], replicas...], ...].
func slotOwner(ctx context.Context, addr string, slot int) (string, error) {
	c := adminClient(addr)
	defer c.Close()
	ranges, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("CLUSTER SLOTS on %s: %w", addr, err)
	}
	for _, r := range ranges {
		if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("CLUSTER SLOTS on %s: slot %d is not served", addr, slot)
}

// outputs formats the server output of nodes for a failure message.
func outputs(nodes []*Instance) string {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "\n--- %s output ---\n%s", n.Addr, n.Output())
	}
	return b.String()
}
