package masterelection

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings of the error; none means valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"empty node id is filled later", func(c *Config) { c.NodeID = "" }, nil},
		{"empty lock name", func(c *Config) { c.LockName = "" }, []string{"LockName"}},
		{"blank lock name", func(c *Config) { c.LockName = " \t" }, []string{"LockName"}},
		{"node id with space", func(c *Config) { c.NodeID = "a b" }, []string{"NodeID", "whitespace"}},
		{"node id with glob", func(c *Config) { c.NodeID = "n*" }, []string{"NodeID", "glob"}},
		{"node id with bracket", func(c *Config) { c.NodeID = "n[1]" }, []string{"NodeID"}},
		{"zero ttl", func(c *Config) { c.LockTTL = 0 }, []string{"LockTTL must be positive"}},
		{"negative heartbeat", func(c *Config) { c.HeartbeatInterval = -time.Second }, []string{"HeartbeatInterval must be positive, got -1s"}},
		{"zero check", func(c *Config) { c.CheckInterval = 0 }, []string{"CheckInterval"}},
		{"negative jitter", func(c *Config) { c.ElectionJitter = -1 }, []string{"ElectionJitter"}},
		{"zero jitter", func(c *Config) { c.ElectionJitter = 0 }, nil},
		{"heartbeat too slow", func(c *Config) { c.HeartbeatInterval = 11 * time.Second }, []string{"HeartbeatInterval (11s)", "LockTTL (30s)"}},
		{"check too slow", func(c *Config) { c.CheckInterval = 30 * time.Second }, []string{"CheckInterval (30s)", "LockTTL (30s)"}},
		{"jitter too long", func(c *Config) { c.ElectionJitter = time.Minute }, []string{"ElectionJitter (1m0s)"}},
		{"margin too large", func(c *Config) { c.StepDownMargin = 25 * time.Second }, []string{"StepDownMargin (25s)"}},
		{"negative replicas", func(c *Config) { c.WaitReplicas = -1 }, []string{"WaitReplicas"}},
		{"wait too long", func(c *Config) { c.WaitReplicas = 1; c.WaitTimeout = 10 * time.Second }, []string{"WaitTimeout (10s)", "HeartbeatInterval (10s)"}},
		{"replicas with default wait", func(c *Config) { c.WaitReplicas = 2 }, nil},
		{"several at once", func(c *Config) { c.LockName = ""; c.CheckInterval = 0 }, []string{"LockName", "CheckInterval"}},
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
			if err == nil {
				t.Fatalf("Validate() = nil, want error with %q", tc.want)
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
		c.CheckInterval != 5*time.Second || c.ElectionJitter != 2*time.Second || !c.Candidate {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	if c.stepDownMargin() != 3*time.Second {
		t.Fatalf("default margin %v", c.stepDownMargin())
	}
}
