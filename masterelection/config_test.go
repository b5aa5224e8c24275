package masterelection

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/registry"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings of the error; none means valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"empty node id is filled later", func(c *Config) { c.NodeID = "" }, nil},
		{"empty lock name is the default", func(c *Config) { c.LockName = "" }, nil},
		{"blank lock name", func(c *Config) { c.LockName = " \t" }, []string{"LockName"}},
		{"node id with space", func(c *Config) { c.NodeID = "a b" }, []string{"NodeID", "whitespace"}},
		{"node id with glob", func(c *Config) { c.NodeID = "n*" }, []string{"NodeID", "glob"}},
		{"node id with bracket", func(c *Config) { c.NodeID = "n[1]" }, []string{"NodeID"}},
		{"zero ttl is the default", func(c *Config) { c.LockTTL = 0 }, nil},
		{"negative ttl", func(c *Config) { c.LockTTL = -time.Second }, []string{"LockTTL must be positive, got -1s"}},
		{"negative heartbeat", func(c *Config) { c.HeartbeatInterval = -time.Second }, []string{"HeartbeatInterval must be positive, got -1s"}},
		{"negative check", func(c *Config) { c.CheckInterval = -1 }, []string{"CheckInterval"}},
		{"negative jitter means none", func(c *Config) { c.ElectionJitter = -1 }, nil},
		{"zero jitter is the default", func(c *Config) { c.ElectionJitter = 0 }, nil},
		{"heartbeat too slow", func(c *Config) { c.HeartbeatInterval = 11 * time.Second }, []string{"HeartbeatInterval (11s)", "LockTTL (30s)"}},
		{"check too slow", func(c *Config) { c.CheckInterval = 30 * time.Second }, []string{"CheckInterval (30s)", "LockTTL (30s)"}},
		{"jitter too long", func(c *Config) { c.ElectionJitter = time.Minute }, []string{"ElectionJitter (1m0s)"}},
		{"margin too large", func(c *Config) { c.StepDownMargin = 25 * time.Second }, []string{"StepDownMargin (25s)"}},
		{"negative replicas", func(c *Config) { c.WaitReplicas = -1 }, []string{"WaitReplicas"}},
		{"wait too long", func(c *Config) { c.WaitReplicas = 1; c.WaitTimeout = 10 * time.Second }, []string{"WaitTimeout (10s)", "HeartbeatInterval (10s)"}},
		{"replicas with default wait", func(c *Config) { c.WaitReplicas = 2 }, nil},
		{"several at once", func(c *Config) { c.LockName = " "; c.CheckInterval = -1; c.WaitReplicas = -1 }, []string{"LockName", "CheckInterval", "WaitReplicas"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.NodeID = "node-1"
			tc.mutate(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want an error wrapping ErrInvalidConfig with %q", err, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestDefaultConfigIsTheSpecs(t *testing.T) {
	c := DefaultConfig()
	if c.LockName != "master-election" || c.LockTTL != 30*time.Second || c.HeartbeatInterval != 10*time.Second ||
		c.CheckInterval != 10*time.Second || c.ElectionJitter != 2*time.Second || c.NonCandidate ||
		c.ProcessTTL != 45*time.Second || c.SlaveTimeout != 15*time.Second || c.StepDownMargin != 0 ||
		c.TransferWindow != 0 || c.WaitTimeout != 0 || c.SlavePrefix != "" {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	if d := c.withDefaults(); d.StepDownMargin != 3*time.Second || d.TransferWindow != 3*time.Second || d.WaitTimeout != 2500*time.Millisecond {
		t.Fatalf("derived defaults: %+v", d)
	}
	// The fields derived from others follow what the caller changed.
	c.LockTTL, c.HeartbeatInterval, c.CheckInterval, c.ElectionJitter = 3*time.Second, time.Second, 500*time.Millisecond, 0
	c.ProcessTTL, c.SlaveTimeout = 0, 0
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig with a shorter LockTTL: %v", err)
	}
	if d := DefaultConfig(); d.ProcessTTL != registry.DefaultProcessTTL || d.SlaveTimeout != registry.DefaultSlaveTimeout {
		t.Fatalf("the registry's defaults differ: %v %v", registry.DefaultProcessTTL, registry.DefaultSlaveTimeout)
	}
	// A dead slave is removed within LockTTL × 2/3, as when slaves looked
	// at the lock every LockTTL/6: the master sweeps every SlaveTimeout/3.
	if d := DefaultConfig(); d.sweepInterval() != 5*time.Second || d.SlaveTimeout <= d.longestSilence() {
		t.Fatalf("sweep every %v, SlaveTimeout %v against the longest silence %v", d.sweepInterval(), d.SlaveTimeout, d.longestSilence())
	}
}

// A zero Config is the default one, and LockTTL alone scales the timings
// with it into a valid configuration.
func TestZeroConfigMeansDefaults(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("Config{}.Validate() = %v", err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	m, err := New(client, Config{LockTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := m.cfg
	if c.NodeID == "" || c.Identifier == "" || !m.Candidate() || c.HeartbeatInterval != time.Second/3 ||
		c.CheckInterval != time.Second/3 || c.ElectionJitter != time.Second/15 || c.ProcessTTL != 1500*time.Millisecond ||
		c.SlaveTimeout != 500*time.Millisecond || c.StepDownMargin != 100*time.Millisecond {
		t.Fatalf("New(Config{LockTTL: 1s}) uses %+v", c)
	}
	if _, err := New(client, Config{LockTTL: -1, LockName: "a b"}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "LockTTL") || !strings.Contains(err.Error(), "LockName") {
		t.Fatalf("New with two problems = %v, want ErrInvalidConfig naming both", err)
	}
}

// TestDefaultConfigFollowsLockTTL: DefaultConfig with only LockTTL changed
// is valid, and its spelled-out timings, ProcessTTL and SlaveTimeout
// included, are those of Config{LockTTL: ...}; a timing the caller changed
// stays as set. Before, LockTTL = 6s was refused for HeartbeatInterval
// (10s), a field never set; later ProcessTTL and SlaveTimeout stayed 45s
// and 15s under a shorter LockTTL, so a dead slave stayed planned for up to
// 45s.
func TestDefaultConfigFollowsLockTTL(t *testing.T) {
	for _, ttl := range []time.Duration{6 * time.Second, time.Second, 3 * time.Millisecond, time.Hour, MaxDuration} {
		c := DefaultConfig()
		c.LockTTL = ttl
		if err := c.Validate(); err != nil {
			t.Errorf("DefaultConfig with LockTTL %v: %v", ttl, err)
			continue
		}
		got, want := c.withDefaults(), Config{LockTTL: ttl}.withDefaults()
		if got.HeartbeatInterval != want.HeartbeatInterval || got.CheckInterval != want.CheckInterval ||
			got.ElectionJitter != want.ElectionJitter || got.ProcessTTL != want.ProcessTTL ||
			got.SlaveTimeout != want.SlaveTimeout || got.StepDownMargin != want.StepDownMargin {
			t.Errorf("LockTTL %v: timings %+v, want those of Config{LockTTL: %v} %+v", ttl, got, ttl, want)
		}
	}
	c := DefaultConfig()
	c.LockTTL = 6 * time.Second
	if got := c.withDefaults(); got.ProcessTTL != 9*time.Second || got.SlaveTimeout != 3*time.Second {
		t.Errorf("LockTTL 6s: ProcessTTL %v, SlaveTimeout %v, want 9s and 3s", got.ProcessTTL, got.SlaveTimeout)
	}
	c = DefaultConfig()
	c.LockTTL, c.ProcessTTL = 6*time.Second, 20*time.Second
	if got := c.withDefaults(); got.ProcessTTL != 20*time.Second || got.SlaveTimeout != 3*time.Second {
		t.Errorf("a ProcessTTL set by the caller: %v, SlaveTimeout %v", got.ProcessTTL, got.SlaveTimeout)
	}
	c = DefaultConfig()
	c.LockTTL, c.CheckInterval = 6*time.Second, 700*time.Millisecond
	if got := c.withDefaults(); got.CheckInterval != 700*time.Millisecond || got.HeartbeatInterval != 2*time.Second {
		t.Errorf("a CheckInterval set by the caller: %v, HeartbeatInterval %v", got.CheckInterval, got.HeartbeatInterval)
	}
	// An explicit value that breaks a rule is still refused.
	c = DefaultConfig()
	c.LockTTL, c.HeartbeatInterval = 6*time.Second, 5*time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "HeartbeatInterval (5s) times 3") {
		t.Errorf("HeartbeatInterval 5s for LockTTL 6s: %v", err)
	}
}

// TestValidateNamesTheFieldSet: durations that would overflow, or that are
// too short through the defaults, are refused with a message that names the
// field the caller set; a NodeID longer than the limit pubsub, durable and
// the registry apply is refused at New. Before: "ProcessTTL
// -1248047h47m16.854775808s must be positive" for a LockTTL of 100 years,
// "TransferWindow (1ms) must be less than LockTTL (1ms)" alone for 1ms,
// HeartbeatInterval 1ns and a 300-byte NodeID accepted.
func TestValidateNamesTheFieldSet(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    []string
		notWant string
	}{
		{name: "LockTTL of 100 years", cfg: Config{LockTTL: 100 * 365 * 24 * time.Hour},
			want: []string{"LockTTL (876000h0m0s) must be at most 8760h0m0s"}, notWant: "ProcessTTL"},
		{name: "DefaultConfig with LockTTL of 100 years", cfg: func() Config { c := DefaultConfig(); c.LockTTL = 100 * 365 * 24 * time.Hour; return c }(),
			want: []string{"LockTTL (876000h0m0s) must be at most"}, notWant: "ProcessTTL"},
		{name: "HeartbeatInterval near the largest duration", cfg: Config{HeartbeatInterval: 1 << 62},
			want: []string{"HeartbeatInterval", "must be at most"}},
		{name: "LockTTL of 1ms", cfg: Config{LockTTL: time.Millisecond},
			want: []string{"HeartbeatInterval (333.333µs, its default LockTTL / 3) must be at least 1ms", "TransferWindow (1ms, its default LockTTL / 10, at least 1ms) must be less than LockTTL (1ms)"}},
		{name: "HeartbeatInterval of 1ns", cfg: Config{HeartbeatInterval: 1},
			want: []string{"HeartbeatInterval (1ns) must be at least 1ms"}},
		{name: "NodeID of 300 bytes", cfg: Config{NodeID: strings.Repeat("n", 300)},
			want: []string{"NodeID is 300 bytes long, the limit is 256"}},
		{name: "NodeID of 256 bytes", cfg: Config{NodeID: strings.Repeat("n", 256)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(idleClient(t), tc.cfg)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("New = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New = %q\nwant it to contain %q", err, w)
				}
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("New = %q, names %s, a field the caller did not set", err, tc.notWant)
			}
		})
	}
}

// TestSetMetadataRefusesWhatTheRegistryWould: metadata over the registry's
// limit is refused by SetMetadata itself, and the metadata stays as it was.
// Before, SetMetadata took it, and the registry dropped the entry later.
func TestSetMetadataRefusesWhatTheRegistryWould(t *testing.T) {
	m, err := New(idleClient(t), Config{NodeID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetMetadata(map[string]any{"zone": "eu"}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{20 << 10, 1 << 20} {
		err := m.SetMetadata(map[string]any{"blob": strings.Repeat("x", size)})
		if !errors.Is(err, registry.ErrMetadataTooLarge) || !strings.Contains(err.Error(), "the limit is 16384") {
			t.Errorf("SetMetadata of %d bytes = %v, want registry.ErrMetadataTooLarge", size, err)
		}
	}
	if err := m.SetMetadata(map[string]any{"f": func() {}}); !errors.Is(err, registry.ErrInvalidProcess) {
		t.Errorf("SetMetadata of a func = %v, want registry.ErrInvalidProcess", err)
	}
	if md := m.Metadata(); len(md) != 1 || md["zone"] != "eu" {
		t.Errorf("metadata after refusals = %v, want the last accepted", md)
	}
}

// idleClient is a client of no server, for New, which does not talk to
// Redis; closed by a t.Cleanup.
func idleClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestHandBackWindow: its default is LockTTL, or SlaveTimeout +
// CheckInterval when longer; a set value below that sum is refused naming
// both, a negative one (no hand-backs) is not.
func TestHandBackWindow(t *testing.T) {
	if d := DefaultConfig().withDefaults(); d.HandBackWindow != 30*time.Second {
		t.Fatalf("default HandBackWindow %v, want LockTTL (30s)", d.HandBackWindow)
	}
	c := Config{LockTTL: 3 * time.Second, SlaveTimeout: 2800 * time.Millisecond}
	if d := c.withDefaults(); d.HandBackWindow != 3800*time.Millisecond {
		t.Fatalf("default HandBackWindow %v, want SlaveTimeout + CheckInterval (3.8s)", d.HandBackWindow)
	}
	c.HandBackWindow = 3 * time.Second
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "HandBackWindow (3s) must be at least SlaveTimeout (2.8s) + CheckInterval (1s)") {
		t.Fatalf("HandBackWindow below SlaveTimeout + CheckInterval: %v", err)
	}
	c.HandBackWindow = -1
	if err := c.Validate(); err != nil {
		t.Fatalf("negative HandBackWindow (off): %v", err)
	}
}

// TestRegistryTimingRules: the registry's rules on the timings are rules of
// Config's one table, with the values and the defaults named.
func TestRegistryTimingRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"ProcessTTL twice the heartbeat", Config{LockTTL: 30 * time.Second, ProcessTTL: 20 * time.Second},
			"ProcessTTL (20s) must exceed twice the longest a live process goes without a registry write, 2 × 12.5s: the longer of HeartbeatInterval (10s, its default LockTTL / 3) and 1.25 × CheckInterval (10s, its default HeartbeatInterval)"},
		// A slave's writes may be 1.25 CheckInterval apart: one lost must
		// not let its entry expire.
		{"ProcessTTL not above 2.5 CheckInterval", Config{LockTTL: 30 * time.Second, ProcessTTL: 25 * time.Second},
			"ProcessTTL (25s) must exceed twice the longest a live process goes without a registry write, 2 × 12.5s"},
		{"SlaveTimeout equal to the heartbeat", Config{HeartbeatInterval: 10 * time.Second, CheckInterval: 5 * time.Second, SlaveTimeout: 10 * time.Second},
			"SlaveTimeout (10s) must exceed the longest a live process goes without a registry write, 10s: the longer of HeartbeatInterval (10s) and 1.25 × CheckInterval (5s)"},
		// A slave's heartbeats ride its checks; the membership loop stands
		// in 1.25 CheckInterval after the last one (slaveBeatStandIn).
		{"SlaveTimeout not above 1.25 CheckInterval", Config{CheckInterval: 10 * time.Second, SlaveTimeout: 12500 * time.Millisecond},
			"SlaveTimeout (12.5s) must exceed the longest a live process goes without a registry write, 12.5s: the longer of HeartbeatInterval (10s, its default LockTTL / 3) and 1.25 × CheckInterval (10s)"},
		{"negative ProcessTTL", Config{ProcessTTL: -time.Second}, "ProcessTTL must be positive, got -1s"},
		{"negative SlaveTimeout", Config{SlaveTimeout: -time.Second}, "SlaveTimeout must be positive, got -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v\nwant ErrInvalidConfig with %q", err, tc.want)
			}
		})
	}
	if err := (Config{LockTTL: 6 * time.Second, ProcessTTL: 5001 * time.Millisecond, SlaveTimeout: 2501 * time.Millisecond}).Validate(); err != nil {
		t.Fatalf("ProcessTTL and SlaveTimeout just above the bounds: %v", err)
	}
}
