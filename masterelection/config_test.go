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
		c.CheckInterval != 5*time.Second || c.ElectionJitter != 2*time.Second || c.NonCandidate ||
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
		c.CheckInterval != time.Second/6 || c.ElectionJitter != time.Second/15 || c.ProcessTTL != 1500*time.Millisecond ||
		c.SlaveTimeout != 500*time.Millisecond || c.StepDownMargin != 100*time.Millisecond {
		t.Fatalf("New(Config{LockTTL: 1s}) uses %+v", c)
	}
	if _, err := New(client, Config{LockTTL: -1, LockName: "a b"}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "LockTTL") || !strings.Contains(err.Error(), "LockName") {
		t.Fatalf("New with two problems = %v, want ErrInvalidConfig naming both", err)
	}
}
