// Package beat lets the election send a process's registry heartbeat in
// the same script call as its look at the lock (a slave's check), without
// a public API for it: the hook takes the data layer's types, which only
// herd can name. Package registry sets HeartbeatWith when it is loaded.
package beat

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
)

// Sender runs the registry's write p (rdb.RegistryPut's script with p),
// alone or in one call with other work (rdb.CheckBeat), and returns its
// outcome.
type Sender func(ctx context.Context, p rdb.Put) (rdb.Stored, error)

// HeartbeatWith is a registry's Heartbeat of processID with the write sent
// by send (nil: by the registry itself). reg is the *registry.Registry.
// send is not called when processID is not registered through reg, and at
// most once otherwise, while the registry holds the process's record. Set
// by package registry's init.
var HeartbeatWith func(ctx context.Context, reg any, processID string, send Sender) error

// TermSender runs the registry's write p of a master registration in one
// call with the acquire of the lock (rdb.AcquireRegister), and returns its
// outcome with the term the acquire minted, which the registry keeps as the
// entry's.
type TermSender func(ctx context.Context, p rdb.Put) (rdb.Stored, int64, error)

// RegisterWith is a registry's Register of info (a
// registry.ProcessInfo with role master and no term) with the write sent
// by send, the entry's term being the one send returns. reg is the
// *registry.Registry. Set by package registry's init.
var RegisterWith func(ctx context.Context, reg any, info any, send TermSender) error

// Recorded reports the role and term a registry last wrote for processID
// (what its heartbeats will write), and whether it holds a record of it.
// reg is the *registry.Registry. Set by package registry's init.
var Recorded func(reg any, processID string) (role string, term int64, ok bool)

// Pending is a registry (a *registry.Registry) for client and keys,
// configured by cfg (a registry.Config), that has not probed the server:
// its first registration, RegisterWith's, is written by a send that asks
// the probe in the same call (rdb.AskTaking) with modes, the backend for
// each answer of the probe (rdb.Take.Modes). Nothing else may be done with
// it before Resolve. Set by package registry's init.
var Pending func(ctx context.Context, client redis.UniversalClient, keys keyspace.Keys, cfg any) (reg any, modes [4]string, err error)

// Resolve chooses the backend of a Pending registry on the probe's answer,
// as its modes did; it fails, and the registry must not be used, when the
// configured backend cannot run on that answer. Set by package registry's
// init.
var Resolve func(reg any, native, hpexpire bool) error
