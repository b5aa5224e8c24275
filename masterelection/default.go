package masterelection

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

var (
	defaultMu       sync.Mutex
	defaultElection *MasterElection
)

// Initialize creates an election with New, starts it, and keeps it as the
// package's default instance, returned by Default. It mirrors the
// specification's initialize()/getMasterElection() pair for code ported from
// it; new code should keep the *MasterElection it creates instead. A default
// instance that already exists is stopped first.
func Initialize(ctx context.Context, client redis.UniversalClient, cfg Config) (*MasterElection, error) {
	m, err := New(client, cfg)
	if err != nil {
		return nil, err
	}
	defaultMu.Lock()
	old := defaultElection
	defaultElection = nil
	defaultMu.Unlock()
	if old != nil {
		if err := old.Stop(ctx); err != nil {
			return nil, err
		}
	}
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	defaultMu.Lock()
	defaultElection = m
	defaultMu.Unlock()
	return m, nil
}

// Default returns the instance made by Initialize, or nil before it.
func Default() *MasterElection {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	return defaultElection
}
