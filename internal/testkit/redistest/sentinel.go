package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settings of the deployments StartSentinel builds. They are short so that a
// failover fits in a test: a primary that stops answering is flagged down
// after SentinelDownAfter and, once two sentinels agree, its replica is
// promoted; a failover that stalls is retried after twice
// SentinelFailoverTimeout.
const (
	// SentinelMasterName is the name the sentinels monitor the primary under.
	SentinelMasterName = "herd"
	// SentinelQuorum is how many sentinels must agree that the primary is down.
	SentinelQuorum = 2
	// SentinelDownAfter is the sentinels' down-after-milliseconds.
	SentinelDownAfter = time.Second
	// SentinelFailoverTimeout is the sentinels' failover-timeout.
	SentinelFailoverTimeout = 3 * time.Second
)

// sentinelReadyTimeout bounds the wait for a new deployment to settle
// (replica in sync, every sentinel aware of the replica and of the others).
const sentinelReadyTimeout = 30 * time.Second

// Sentinel is a Redis Sentinel deployment built by StartSentinel from one
// server executable: a primary, a replica of it, and three sentinels
// (`<server> sentinel.conf --sentinel`) monitoring it under
// SentinelMasterName with quorum 2. Every process listens on 127.0.0.1 and
// runs in its own directory; the data nodes persist nothing. It is safe for
// concurrent use.
type Sentinel struct {
	// Server is the executable every process runs.
	Server Server
	// Data are the data nodes: Data[0] started as the primary, Data[1] as
	// its replica. Which one is primary now is Primary's answer. Restart on
	// a data node brings it back empty with its first role's arguments; the
	// sentinels then turn it into a replica of the current primary.
	Data []*Instance
	// Sentinels are the three sentinel processes.
	Sentinels []*SentinelNode
}

// SentinelNode is one sentinel process. It has the control methods of an
// Instance that make sense for a sentinel; it cannot be restarted.
type SentinelNode struct {
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port on 127.0.0.1 the sentinel listens on.
	Port int
	// Dir holds the sentinel's configuration file, which it rewrites.
	Dir string

	inst *Instance // the process, its output, and its cleanup
}

// Kill sends SIGKILL to the sentinel and waits until it is reaped.
func (n *SentinelNode) Kill(t testing.TB) { t.Helper(); n.inst.Kill(t) }

// Pause freezes the sentinel with SIGSTOP.
func (n *SentinelNode) Pause(t testing.TB) { t.Helper(); n.inst.Pause(t) }

// Resume continues a sentinel frozen by Pause.
func (n *SentinelNode) Resume(t testing.TB) { t.Helper(); n.inst.Resume(t) }

// Pid returns the process id of the sentinel, or 0 if it is not running.
func (n *SentinelNode) Pid() int { return n.inst.Pid() }

// Output returns the last 64 KiB of the sentinel's output.
func (n *SentinelNode) Output() string { return n.inst.Output() }

// StartSentinel starts a primary, its replica and three sentinels of s, and
// returns once the replica is in sync and every sentinel knows the replica
// and the two other sentinels, so that killing the primary leads to a
// failover. Every process is stopped by a t.Cleanup. The test fails if s
// cannot run as a sentinel or the deployment does not settle within 30s.
func StartSentinel(t testing.TB, s Server) *Sentinel {
	t.Helper()
	// Replicas start their full sync at once instead of after 5s.
	const noDelay = "--repl-diskless-sync-delay"
	primary := Start(t, s, noDelay, "0")
	replica := Start(t, s, noDelay, "0", "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	d := &Sentinel{Server: s, Data: []*Instance{primary, replica}}
	for range 3 {
		d.Sentinels = append(d.Sentinels, startSentinelNode(t, s, primary.Port))
	}

	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	err := waitLinkUp(ctx, replica.Addr)
	if err == nil {
		err = poll(ctx, func() error { return d.settled(ctx, primary.Addr, 1) })
	}
	if err != nil {
		t.Fatalf("redistest: StartSentinel on %s: %v%s", s.Name, err, d.outputs())
	}
	return d
}

// startSentinelNode starts one sentinel monitoring the primary on
// primaryPort, choosing a fresh port when the first one is taken.
func startSentinelNode(t testing.TB, s Server, primaryPort int) *SentinelNode {
	t.Helper()
	inst := startEach(t, s, "a sentinel of "+s.Name, func(inst *Instance, port int) (*proc, error) {
		return launchSentinel(inst, port, primaryPort)
	})
	return &SentinelNode{Addr: inst.Addr, Port: inst.Port, Dir: inst.Dir, inst: inst}
}

// sentinelConf is the configuration file of a sentinel: the config file
// must be the first argument of `<server> sentinel.conf --sentinel`, and
// must be writable (the sentinel rewrites it with what it learns).
func sentinelConf(port, primaryPort int, dir string) string {
	name := SentinelMasterName
	return fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
logfile ""
dir %q
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, port, dir, name, primaryPort, SentinelQuorum,
		name, SentinelDownAfter.Milliseconds(), name, SentinelFailoverTimeout.Milliseconds(), name)
}

// launchSentinel is Instance.launch for a sentinel: it writes the
// configuration into inst.Dir, starts the process and waits until it
// answers as itself. On error the process has been killed and reaped.
func launchSentinel(inst *Instance, port, primaryPort int) (*proc, error) {
	conf := filepath.Join(inst.Dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(sentinelConf(port, primaryPort, inst.Dir)), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", conf, err)
	}
	return inst.spawn([]string{conf, "--sentinel"}, "sentinel of "+inst.Server.Name, port)
}

// Addrs returns the sentinels' addresses.
func (d *Sentinel) Addrs() []string {
	var out []string
	for _, n := range d.Sentinels {
		out = append(out, n.Addr)
	}
	return out
}

// FailoverOptions returns fresh options for redis.NewFailoverClient: the
// master name, every sentinel, and the settings of Instance.Options
// (ContextTimeoutEnabled, 2s timeouts, 3 retries, no CLIENT SETINFO). The
// caller owns and closes the client.
func (d *Sentinel) FailoverOptions() *redis.FailoverOptions {
	u := universalOptions(d.Addrs()...)
	u.MasterName = SentinelMasterName
	return u.Failover()
}

// Client returns a new failover client (redis.NewFailoverClient) built from
// FailoverOptions, closed by a t.Cleanup. It follows the primary across
// failovers.
func (d *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(d.FailoverOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Primary returns the data node that a quorum of the live sentinels name as
// primary now. It fails the test when they do not agree.
func (d *Sentinel) Primary(t testing.TB) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := d.agreedPrimary(ctx)
	if err != nil {
		t.Fatalf("redistest: sentinels of %s: %v", d.Server.Name, err)
	}
	inst, err := d.dataNode(addr)
	if err != nil {
		t.Fatalf("redistest: sentinels of %s: %v", d.Server.Name, err)
	}
	return inst
}

// KillPrimary kills the current primary with SIGKILL, as Primary names it,
// and returns it.
func (d *Sentinel) KillPrimary(t testing.TB) *Instance {
	t.Helper()
	p := d.Primary(t)
	p.Kill(t)
	return p
}

// WaitPromoted waits until a quorum of the live sentinels name a primary
// other than old and that node answers ROLE as a master, and returns it. It
// fails the test after timeout (30s when 0).
func (d *Sentinel) WaitPromoted(t testing.TB, old *Instance, timeout time.Duration) *Instance {
	t.Helper()
	if timeout <= 0 {
		timeout = sentinelReadyTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var promoted *Instance
	err := poll(ctx, func() error {
		addr, err := d.agreedPrimary(ctx)
		if err != nil {
			return err
		}
		if addr == old.Addr {
			return fmt.Errorf("sentinels still name %s", addr)
		}
		inst, err := d.dataNode(addr)
		if err != nil {
			return err
		}
		role, err := roleOf(ctx, addr)
		if err != nil {
			return err
		}
		if role != "master" {
			return fmt.Errorf("%s named primary but its role is %s", addr, role)
		}
		promoted = inst
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: no primary promoted in place of %s on %s: %v%s", old.Addr, d.Server.Name, err, d.outputs())
	}
	return promoted
}

// WaitReplicas waits until the current primary (as Primary names it) has n
// replicas with their link up and the sentinels know of them, within
// timeout (30s when 0). Use it after restarting a killed node, which the
// sentinels turn into a replica of the new primary.
func (d *Sentinel) WaitReplicas(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	if timeout <= 0 {
		timeout = sentinelReadyTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := poll(ctx, func() error {
		addr, err := d.agreedPrimary(ctx)
		if err != nil {
			return err
		}
		s, err := adminText(ctx, addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", addr, err)
		}
		if v, _ := InfoField(s, "connected_slaves"); v != strconv.Itoa(n) {
			return fmt.Errorf("primary %s has %s connected replicas, want %d", addr, v, n)
		}
		for i := range n {
			line, _ := InfoField(s, "slave"+strconv.Itoa(i))
			if !strings.Contains(line, "state=online") {
				return fmt.Errorf("primary %s: replica %d is %q", addr, i, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: sentinel deployment on %s: %v%s", d.Server.Name, err, d.outputs())
	}
}

// settled reports nil once every live sentinel names primary, knows at
// least replicas replicas of it and the other sentinels, and sees it up.
func (d *Sentinel) settled(ctx context.Context, primary string, replicas int) error {
	for _, n := range d.Sentinels {
		if n.Pid() == 0 {
			continue
		}
		m, err := sentinelMaster(ctx, n.Addr)
		if err != nil {
			return err
		}
		addr := m["ip"] + ":" + m["port"]
		if addr != primary {
			return fmt.Errorf("sentinel %s names %s, want %s", n.Addr, addr, primary)
		}
		if m["flags"] != "master" {
			return fmt.Errorf("sentinel %s: primary flags %q", n.Addr, m["flags"])
		}
		if r, _ := strconv.Atoi(m["num-slaves"]); r < replicas {
			return fmt.Errorf("sentinel %s knows %s replicas, want %d", n.Addr, m["num-slaves"], replicas)
		}
		if m["num-other-sentinels"] != strconv.Itoa(len(d.Sentinels)-1) {
			return fmt.Errorf("sentinel %s knows %s other sentinels, want %d", n.Addr, m["num-other-sentinels"], len(d.Sentinels)-1)
		}
	}
	return nil
}

// agreedPrimary returns the primary address named by at least
// SentinelQuorum live sentinels.
func (d *Sentinel) agreedPrimary(ctx context.Context) (string, error) {
	votes := map[string]int{}
	var answers []string
	for _, n := range d.Sentinels {
		if n.Pid() == 0 {
			continue
		}
		c := redis.NewSentinelClient(sentinelAdminOptions(n.Addr))
		addr, err := c.GetMasterAddrByName(ctx, SentinelMasterName).Result()
		_ = c.Close()
		if err != nil || len(addr) != 2 {
			answers = append(answers, fmt.Sprintf("%s: %v %v", n.Addr, addr, err))
			continue
		}
		a := addr[0] + ":" + addr[1]
		answers = append(answers, n.Addr+": "+a)
		votes[a]++
		if votes[a] >= SentinelQuorum {
			return a, nil
		}
	}
	return "", fmt.Errorf("no primary named by %d sentinels: %s", SentinelQuorum, strings.Join(answers, "; "))
}

func (d *Sentinel) dataNode(addr string) (*Instance, error) {
	for _, n := range d.Data {
		if n.Addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("primary %s is not a data node of this deployment", addr)
}

func (d *Sentinel) outputs() string {
	s := outputs(d.Data)
	for _, n := range d.Sentinels {
		s += fmt.Sprintf("\n--- sentinel %s output ---\n%s", n.Addr, n.Output())
	}
	return s
}

func sentinelAdminOptions(addr string) *redis.Options {
	o := clientOptions(addr)
	o.MaxRetries = -1
	o.PoolSize = 1
	return o
}

// sentinelMaster returns SENTINEL MASTER <name> from the sentinel on addr.
func sentinelMaster(ctx context.Context, addr string) (map[string]string, error) {
	c := redis.NewSentinelClient(sentinelAdminOptions(addr))
	defer c.Close()
	m, err := c.Master(ctx, SentinelMasterName).Result()
	if err != nil {
		return nil, fmt.Errorf("SENTINEL MASTER %s on %s: %w", SentinelMasterName, addr, err)
	}
	return m, nil
}

// roleOf returns the first element of ROLE on addr: "master" or "slave".
func roleOf(ctx context.Context, addr string) (string, error) {
	c := adminClient(addr)
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", fmt.Errorf("ROLE on %s: %w", addr, err)
	}
	if len(v) == 0 {
		return "", fmt.Errorf("ROLE on %s: empty reply", addr)
	}
	role, ok := v[0].(string)
	if !ok {
		return "", fmt.Errorf("ROLE on %s: unexpected reply %v", addr, v)
	}
	return role, nil
}
