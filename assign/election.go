package assign

import (
	"context"
	"time"

	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// PlannerElection is what a Planner needs of its process's election: who
// it is, the timings its defaults follow, the slaves, the mastership and
// the events that call for a plan. *masterelection.MasterElection
// implements it. Implementations must be safe for concurrent use.
type PlannerElection interface {
	// NodeID is this process's node id: the master is never a slave of
	// its own plan.
	NodeID() string
	// Keys names the election's keys; the set's keys derive from them
	// (keyspace.Keys.Assign), and the plan is fenced by its lock.
	Keys() keyspace.Keys
	// LockTTL is the election's lock TTL, which the timings' defaults
	// follow (Config).
	LockTTL() time.Duration
	// SlaveTimeout is how old a slave's last heartbeat gets before the
	// master removes it; Config.Grace tells a Stop from a crash by it.
	SlaveTimeout() time.Duration
	// ProcessesByRole lists the live processes of role, with their
	// capabilities and last heartbeat.
	ProcessesByRole(ctx context.Context, role registry.Role) ([]registry.ProcessInfo, error)
	// RunIfMaster runs fn with the current term while this process is
	// master, fn's ctx done when the mastership ends; not master, it
	// returns an error matching keyspace.ErrNotMaster without calling fn.
	RunIfMaster(ctx context.Context, fn func(ctx context.Context, term int64) error) (ran bool, err error)
	// OnMasterAcquired, OnSlaveRegistered and OnEvent register handlers
	// until the returned unsubscribe is called. The Planner's handlers do
	// not block; OnEvent's is called for every event and acts on
	// masterelection.EventSlaveRemoved.
	OnMasterAcquired(fn func(ctx context.Context, term int64)) (unsubscribe func())
	OnSlaveRegistered(fn func(registry.SlaveNode)) (unsubscribe func())
	OnEvent(fn func(masterelection.Event)) (unsubscribe func())
}

// WorkerElection is what a Worker needs of its process's election: the
// identity its items' ownership is written under, and the timings its
// defaults follow. *masterelection.MasterElection implements it; it need
// not be started when NewWorker is called. Implementations must be safe
// for concurrent use.
type WorkerElection interface {
	// NodeID is this process's node id, which the Planner plans for.
	NodeID() string
	// Incarnation names this run of the process; it is written in the
	// items' ownership, so that a process never takes over items another
	// process under its NodeID still owns.
	Incarnation() string
	// SteppedAside is non-nil once the process stepped aside for another
	// live process under its NodeID: the Worker then claims nothing.
	SteppedAside() error
	// Keys names the election's keys; the set's keys derive from them
	// (keyspace.Keys.Assign).
	Keys() keyspace.Keys
	// LockTTL is the election's lock TTL, which the timings' defaults
	// follow (Config).
	LockTTL() time.Duration
}
