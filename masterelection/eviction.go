package masterelection

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// memoryPolicy is what a Redis server says about eviction.
type memoryPolicy struct {
	policy    string // maxmemory-policy: "noeviction", "volatile-lru", "allkeys-lru", …
	maxmemory int64  // bytes; 0 means no limit, and then nothing is evicted
}

// evictionRead is what readEviction found: the server's address when the
// client tells, its eviction settings, or why they could not be read.
type evictionRead struct {
	addr string
	mp   memoryPolicy
	err  error
}

// refused tells whether the read was refused by the server (NOPERM, an
// unknown or disabled command): asking again would get the same answer.
func (r evictionRead) refused() bool {
	var refused redis.Error
	return errors.As(r.err, &refused)
}

// readEviction asks the server that holds the election's keys whether it
// may evict them, once, at Start (prepare), waiting at most one operation
// timeout (one round trip when Redis answers); reportEviction says what
// the answer means.
//
// It reads INFO memory rather than CONFIG GET maxmemory-policy and CONFIG
// GET maxmemory: the same two values in one command and one round trip, and
// INFO is allowed where CONFIG is not: managed services that disable CONFIG
// (with volatile-lru as their default policy, as on ElastiCache) and
// least-privileged ACL users, whom CONFIG GET would let read every setting,
// passwords included (docs/topologies.md grants +info instead).
func (n *node) readEviction(ctx context.Context) evictionRead {
	ctx, cancel := context.WithTimeout(ctx, n.opTimeout())
	defer cancel()
	addr, mp, err := readMemoryPolicy(ctx, n.client, n.keys.Master)
	return evictionRead{addr: addr, mp: mp, err: err}
}

// reportEviction says what readEviction found: an error event wrapping
// ErrEvictionPolicy and a warning when the server may evict the election's
// keys, a log line when the server does not tell. It never fails Start.
// It needs the registry (the emulated backend has a key more).
func (n *node) reportEviction(r evictionRead) {
	addr, mp, err := r.addr, r.mp, r.err
	log := n.log
	if addr != "" {
		log = log.With().Str("redis", addr).Logger()
	}
	if err != nil {
		// A refusal (NOPERM, an unknown or disabled command) is the
		// server's choice; anything else (a timeout) may deserve a look.
		ev := log.Warn()
		if r.refused() {
			ev = log.Info()
		}
		ev.Err(err).Msg("maxmemory-policy not checked: if this Redis can evict keys, it can end a healthy master's lock (docs/safety.md, \"Eviction\")")
		return
	}
	switch {
	case mp.policy == "noeviction":
		log.Debug().Str("policy", mp.policy).Int64("maxmemory", mp.maxmemory).Msg("maxmemory-policy noeviction: Redis never evicts the election's keys")
		return
	case mp.maxmemory == 0:
		log.Info().Str("policy", mp.policy).Msg("maxmemory-policy " + mp.policy +
			" evicts nothing while maxmemory is 0 (no limit): safe while maxmemory stays 0")
		return
	}
	keys, effect := evictionRisk(mp.policy, n.keys, emulated(n.registry()))
	where := "on the server that holds the lock"
	if addr != "" {
		where = "on " + addr
	}
	err = fmt.Errorf("%w: maxmemory-policy %s with maxmemory %d bytes %s: %s; "+
		"set maxmemory-policy noeviction, or give the election a Redis instance of its own with noeviction (docs/safety.md, \"Eviction\")",
		ErrEvictionPolicy, mp.policy, mp.maxmemory, where, effect)
	// Not emitError: this is no failed attempt, so it must not become the
	// "last error" that Start names when the first election does not resolve.
	log.Warn().Str("policy", mp.policy).Int64("maxmemory", mp.maxmemory).Strs("evictable", keys).Err(err).
		Msg("redis may evict the election's keys")
	n.bus.emit(topicError, payload{err: err})
}

// readMemoryPolicy reads the eviction settings of the server that holds key
// (serverOf). addr names that server when the client tells.
func readMemoryPolicy(ctx context.Context, client redis.UniversalClient, key string) (addr string, mp memoryPolicy, err error) {
	srv, addr, err := serverOf(ctx, client, key)
	if err != nil {
		return addr, mp, err
	}
	r := memoryRead(addr, srv.Info(ctx, "memory"))
	return r.addr, r.mp, r.err
}

// serverOf returns the server that holds key: on a *redis.ClusterClient the
// master of key's slot (maxmemory is per node, and the keys of one election
// share a slot), otherwise client itself. addr names that server when the
// client tells ("" for a Sentinel failover client).
func serverOf(ctx context.Context, client redis.UniversalClient, key string) (srv redis.UniversalClient, addr string, err error) {
	switch cl := client.(type) {
	case *redis.ClusterClient:
		node, err := cl.MasterForKey(ctx, key)
		if err != nil {
			return nil, "", fmt.Errorf("find the cluster node of %s: %w", key, err)
		}
		return node, node.Options().Addr, nil
	case *redis.Client:
		if a := cl.Options().Addr; a != "FailoverClient" { // go-redis's placeholder for a Sentinel client
			addr = a
		}
	}
	return client, addr, nil
}

// memoryRead is what the reply of INFO memory, sent to the server at addr,
// says about eviction.
func memoryRead(addr string, info *redis.StringCmd) evictionRead {
	reply, err := info.Result()
	if err != nil {
		return evictionRead{addr: addr, err: fmt.Errorf("INFO memory: %w", err)}
	}
	mp, err := parseMemoryPolicy(reply)
	return evictionRead{addr: addr, mp: mp, err: err}
}

// parseMemoryPolicy reads maxmemory and maxmemory_policy from the reply of
// INFO memory ("field:value" lines).
func parseMemoryPolicy(info string) (memoryPolicy, error) {
	var (
		mp                memoryPolicy
		gotMax, gotPolicy bool
	)
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !ok {
			continue
		}
		switch name {
		case "maxmemory":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return mp, fmt.Errorf("INFO memory: maxmemory %q: %w", value, err)
			}
			mp.maxmemory, gotMax = n, true
		case "maxmemory_policy":
			mp.policy, gotPolicy = value, value != ""
		}
	}
	if !gotMax || !gotPolicy {
		return mp, errors.New("INFO memory: the reply has no maxmemory or maxmemory_policy field")
	}
	return mp, nil
}

// emulated tells whether reg uses the emulated backend.
func emulated(reg *registry.Registry) bool {
	return reg != nil && reg.Backend() == registry.BackendEmulated
}

// evictionRisk returns the election's keys that policy can evict and what
// their eviction does, for the error event. emulated tells whether the
// registry uses the emulated backend (which has a second key).
//
// volatile-* policies take only keys with a TTL of their own: the lock,
// heartbeat and master_process keys. The term key has none, and neither has
// the registry hash (its entries expire by hash-field TTL, which eviction
// does not look at; measured on Redis 8.0.6 and Valkey 9.1.2). allkeys-*
// policies take any key.
func evictionRisk(policy string, k keyspace.Keys, emulated bool) (keys []string, effect string) {
	lock := []string{k.Master, k.Heartbeat, k.MasterProcess}
	all := append(append([]string(nil), lock...), k.Term, k.Processes)
	if emulated {
		all = append(all, k.ProcessesExpiry)
	}
	lockLoss := fmt.Sprintf("Redis can delete the lock %s of a healthy master; a slave can then take it and act as master "+
		"while the old master still does, until the new master's notice or its own next renewal tells it "+
		"(at most LockTTL - StepDownMargin if neither reaches it)", k.Master)
	switch {
	case strings.HasPrefix(policy, "volatile-"):
		return lock, fmt.Sprintf("it evicts keys with a TTL: %s. %s. Terms still grow: %s has no TTL",
			strings.Join(lock, ", "), lockLoss, k.Term)
	case strings.HasPrefix(policy, "allkeys-"):
		return all, fmt.Sprintf("it evicts any key: %s. %s. "+
			"The term key %s can go too: the master's next renewal fails, the slaves report ErrDataLoss and wait LockTTL, "+
			"and the next term comes from the server clock. The registry %s can go too: every process is listed again at its next heartbeat",
			strings.Join(all, ", "), lockLoss, k.Term, k.Processes)
	}
	return all, fmt.Sprintf("herd does not know this policy and counts every key as evictable: %s. %s",
		strings.Join(all, ", "), lockLoss)
}
