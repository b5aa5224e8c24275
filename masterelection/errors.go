package masterelection

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

// Errors returned or reported by MasterElection. Match them with errors.Is.
var (
	// ErrInvalidConfig is wrapped by the errors of Config.Validate and New:
	// the message names every problem of the configuration.
	ErrInvalidConfig = errors.New("masterelection: invalid config")
	// ErrNotMaster is returned by RunIfMaster when this process is not
	// master, and by Transfer. It is the same error as registry.ErrNotMaster
	// and pubsub.ErrNotMaster (keyspace.ErrNotMaster): one errors.Is matches a
	// refusal of any package.
	ErrNotMaster = keyspace.ErrNotMaster
	// ErrNoRegistry is returned by the registry methods of a MasterElection
	// that has no registry: before Start, or in standalone mode.
	ErrNoRegistry = errors.New("masterelection: no process registry (not started, or standalone)")
	// ErrTransferNotTaken is returned by Transfer when the lock it released
	// was not taken by the successor it named within the transfer window: the
	// normal election went on and another process, or none yet, is master.
	ErrTransferNotTaken = errors.New("masterelection: the named successor did not take the lock")
	// ErrNilClient is returned by New when the Redis client is nil, or an
	// interface holding a nil pointer (a nil *redis.Client).
	ErrNilClient = errors.New("masterelection: nil redis client")
	// ErrAlreadyStarted is returned by Start when it was called before.
	ErrAlreadyStarted = errors.New("masterelection: already started")
	// ErrStopped is returned by Start and WaitForElectionComplete after Stop.
	ErrStopped = errors.New("masterelection: stopped")
	// ErrNotStarted is returned by WaitForElectionComplete before Start.
	ErrNotStarted = errors.New("masterelection: not started")
	// ErrHandlersRunning is wrapped by the error of Stop (and Transfer) when
	// their wait for the OnMasterAcquired handlers ended (ctx ended) before
	// the handlers returned. The message says whether the lock was released
	// all the same, in which case another process may be master while the
	// handler still runs.
	ErrHandlersRunning = errors.New("masterelection: OnMasterAcquired handlers still running")
	// ErrPermission is wrapped by Start's error when Redis refuses the user:
	// a wrong password or user name (WRONGPASS), or an ACL that refuses a
	// command the election runs on its keys or channels (PUBLISH, SUBSCRIBE,
	// EVAL, ...). The message gives Redis's answer, or names every refused
	// command with its key or channel (on Redis 7.0 and later and Valkey).
	// Start then returns at once: no attempt would fare better. Start has
	// written nothing.
	ErrPermission = errors.New("masterelection: redis refuses this user")
	// ErrGarbage is wrapped by the error events about a herd key that holds
	// something herd never writes (written by another program).
	ErrGarbage = errors.New("masterelection: unexpected value in redis")
	// ErrDuplicateNodeID: another live process runs with this process's
	// NodeID. It is wrapped by the error event emitted when the lock is
	// held under the NodeID by a mastership this process never had, and by
	// Start's error and the error event of a process that steps aside
	// because the registry entry of its NodeID is another live process's
	// (see SteppedAside, and docs/safety.md on how a restart after a crash
	// is told from a twin).
	ErrDuplicateNodeID = errors.New("masterelection: another live process runs under this node id")
	// ErrDataLoss is wrapped by the error event emitted when the term key,
	// which is never deleted, is found missing: Redis lost its data (a restart
	// without persistence, a fail-over to a replica that had not received the
	// lock, a FLUSHALL). A master elected before the loss may still believe it
	// is master until its self-fencing deadline, so this process waits LockTTL
	// before it contends.
	ErrDataLoss = errors.New("masterelection: redis lost the election's data")
	// ErrReplicas is wrapped by the error event emitted when a lock write
	// was acknowledged by fewer replicas than Config.WaitReplicas.
	ErrReplicas = errors.New("masterelection: too few replicas acknowledged the lock")
	// ErrEvictionPolicy is wrapped by the error event emitted at Start when
	// the Redis server that holds the election's keys has a maxmemory limit
	// and a maxmemory-policy other than noeviction. Redis may then evict the
	// lock of a healthy master (every volatile-* and allkeys-* policy), and
	// a slave can become master while the old master still acts; allkeys-*
	// policies can also evict the term key, which herd reads as a data loss.
	// The message names the policy, the limit and the keys at risk. The
	// election runs all the same; see docs/safety.md, "Eviction".
	ErrEvictionPolicy = errors.New("masterelection: redis may evict the election's keys")
	// ErrClusterCoverage is wrapped by the error event emitted at Start on
	// a Redis Cluster whose node holding the election's keys has
	// cluster-require-full-coverage yes and a cluster-node-timeout for which
	// a failover of any other master (the slot then answers CLUSTERDOWN
	// until the promotion) outlasts LockTTL - StepDownMargin: the master
	// would step down although its own node is healthy. The election runs
	// all the same; see docs/topologies.md.
	ErrClusterCoverage = errors.New("masterelection: a failover elsewhere in the cluster can end the mastership")
	// ErrUnconfirmedNotice is wrapped by the error event emitted when an
	// "acquired" notice on the events channel claims a term that Redis,
	// asked right after it, does not have: the notice was not sent by a lock
	// script (a client that may PUBLISH on the channel sent it, or another
	// deployment uses the same lock name). Notices only make herd ask Redis
	// sooner, so it changed nothing; see docs/safety.md, "Who can break what".
	ErrUnconfirmedNotice = errors.New("masterelection: a notice that redis does not confirm")
	// ErrHandlerPanic is wrapped by the error event emitted when an event
	// handler panics.
	ErrHandlerPanic = errors.New("masterelection: event handler panicked")
)

// transientPrefixes are the Redis error replies of a server that is
// restarting, failing over or between roles, each of which herd retries
// until it passes.
var transientPrefixes = []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "BUSY", "MOVED", "ASK"}

// Transient reports whether err, an error event's (OnError, Event.Err), is
// one of the failures a Redis restart, a failover or a network blip causes,
// which herd retries and heals by itself: a deadline passed, a connection
// refused, reset, closed (EOF) or timed out, or a server that answers
// LOADING, CLUSTERDOWN, TRYAGAIN, MASTERDOWN, READONLY, BUSY, MOVED or ASK.
// They say Redis was out of reach for a moment; what that cost shows as
// master-lost events and no master (herd_cluster_has_master). The rest need
// a person: a refused permission (ErrPermission), foreign values in
// herd's keys (ErrGarbage), a twin (ErrDuplicateNodeID), an eviction
// policy, a handler's panic, out of memory, and any error Transient does not
// know. Alert on those at once, on transient ones only when they last.
func Transient(err error) bool {
	if err == nil || needsAPerson(err) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return slices.ContainsFunc(transientPrefixes, func(p string) bool { return redis.HasErrorPrefix(rerr, p) })
	}
	var nerr net.Error
	return slices.ContainsFunc(transientCauses, func(cause error) bool { return errors.Is(err, cause) }) || errors.As(err, &nerr)
}

// personal are the errors of herd's own that Transient never calls
// transient: each needs a person.
var personal = []error{ErrPermission, ErrGarbage, ErrDuplicateNodeID, ErrEvictionPolicy,
	ErrClusterCoverage, ErrUnconfirmedNotice, ErrHandlerPanic, ErrReplicas, ErrDataLoss}

// transientCauses are the causes of a failed call that Transient calls
// transient, besides a net.Error and the transientPrefixes.
var transientCauses = []error{context.DeadlineExceeded, io.EOF, io.ErrUnexpectedEOF, redis.ErrClosed,
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE}

// needsAPerson reports whether err wraps one of the personal errors.
func needsAPerson(err error) bool {
	return slices.ContainsFunc(personal, func(sentinel error) bool { return errors.Is(err, sentinel) })
}
