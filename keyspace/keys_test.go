package keyspace

import (
	"strings"
	"testing"
)

func TestLockNameOfTermKey(t *testing.T) {
	for _, lock := range []string{"master-election", "a:b", "x{y"} {
		for _, cluster := range []bool{false, true} {
			k := NewKeys(lock, cluster)
			if got, ok := LockNameOfTermKey(k.Term); !ok || got != lock {
				t.Errorf("LockNameOfTermKey(%q) = %q, %v; want %q", k.Term, got, ok, lock)
			}
		}
	}
	for _, key := range []string{"master-election:master", ":term", "{a:term", "{}:term", "a b:term", "term"} {
		if got, ok := LockNameOfTermKey(key); ok {
			t.Errorf("LockNameOfTermKey(%q) = %q, true; want false", key, got)
		}
	}
	if TermKeyPattern != "*"+NewKeys("", false).Term {
		t.Errorf("TermKeyPattern = %q", TermKeyPattern)
	}
}

func TestKeys(t *testing.T) {
	k := NewKeys("master-election", false)
	want := map[string]string{
		k.Master: "master-election:master", k.Heartbeat: "master-election:heartbeat",
		k.MasterProcess: "master-election:master_process", k.Processes: "master-election:processes",
		k.Term: "master-election:term", k.Events: "master-election:events",
	}
	for got, w := range want {
		if got != w {
			t.Errorf("key %q, want %q", got, w)
		}
	}
	c := NewKeys("svc", true)
	for _, key := range []string{c.Master, c.Heartbeat, c.MasterProcess, c.Term, c.Processes, c.ProcessesExpiry} {
		if !strings.HasPrefix(key, "{svc}:") {
			t.Errorf("cluster key %q lacks the hash tag", key)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"uuid", "6f1c2d3e-aaaa-4bbb-8ccc-0123456789ab", true},
		{"dotted", "svc.eu-1:7", true},
		{"empty", "", false},
		{"blank", "  ", false},
		{"space", "a b", false},
		{"tab", "a\tb", false},
		{"star", "a*", false},
		{"question", "a?", false},
		{"bracket", "a[1]", false},
		{"quote", `a"b`, false},
		{"control", "a\x00b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName("NodeID", tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateName(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "NodeID") {
				t.Fatalf("error %q does not name the field", err)
			}
		})
	}
}
