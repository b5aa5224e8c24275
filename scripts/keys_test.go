package scripts

import "testing"

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
