// Package registry is herd's process registry: every process of an election
// announces itself (role, capabilities, last heartbeat) in one Redis hash and
// stays listed only while it heartbeats; the master follows its slaves with
// a SlaveTracker.
//
//	reg, err := registry.New(ctx, client, keyspace.NewKeys("master-election", false), registry.Config{})
//	...
//	err = reg.Register(ctx, registry.ProcessInfo{ProcessID: id, Role: registry.RoleSlave})
//	...
//	err = reg.Heartbeat(ctx, id) // every few seconds, well within ProcessTTL
//	...
//	slaves, err := reg.Slaves(ctx)
//
// # Storage
//
// The registry is the hash Keys.Processes: field = process id, value =
// ProcessInfo JSON in the specification's form (timestamps as JavaScript's
// toISOString writes them), each entry with its own TTL (Config.ProcessTTL).
// Slaves and channels are derived from it; there is no separate slaves or
// channels hash. Three backends give entries their TTL, chosen once by New
// by trying the commands: native HSETEX (Redis 8, Valkey 9), HSET + HPEXPIRE
// (Redis 7.4+), or an emulation with a sorted set of deadlines (any server):
// see Backend and docs/redis-versions.md. They behave the same: an entry is
// gone from every read once its TTL has passed.
//
// Every write is one Lua script, so it is atomic and costs one round trip:
// Register and a Heartbeat that finds the entry gone also publish
// {"event":"registered","nodeId":id,"role":role,"version":v,"process":info} on
// Keys.RegistryEvents, and Unregister publishes
// {"event":"unregistered","nodeId":id,"version":v} (with "reason":"stale"
// when the master removes a stale slave, and "reason":"expired" when an
// emulated read removes an expired entry). A Go program reads them as
// keyspace.Notice values, with keyspace.ParseNotice, as the tracker does.
//
// # Versions
//
// Every write, deletions included, mints a version in its script:
// max(Keys.ProcessesVersion + 1, server TIME in microseconds). It is stored
// in the entry (ProcessInfo.Version) and sent in the notice, and it is
// larger than every version minted before on the lock name, within one
// microsecond, after a deletion or an expiry, and, by the server's clock,
// after Redis lost its data. Of two states of one process, the one with the
// larger version is the later.
//
// # Role master is fenced
//
// Redis stores an entry with role master only while its process holds the
// lock (Keys.Master is its NodeID) under the term it writes (Keys.Term is
// info.Term), checked in the script that writes, as the lock scripts check
// it. A master replaced while it was paused cannot write itself back as
// master when it resumes: its write is stored and announced with role slave,
// and Register or Heartbeat returns an error wrapping ErrNotMaster.
//
// # Slave events
//
// A SlaveTracker, run by the master while it is master, turns those notices
// and a periodic sweep into OnJoin and OnLeave calls: when it starts it
// reports every slave already registered, then each join and each leave
// exactly once. A slave leaves at once when it unregisters or becomes
// master, and otherwise when its lastSeen gets older than SlaveTimeout: the
// master then removes its entry (the specification's cleanupStaleSlaves), or
// finds it already gone (expired, or lost with Redis's data). A slave that
// heartbeats again is registered, and reported, again.
//
// Notices are hints: any client allowed to PUBLISH can send one. The tracker
// confirms each against the registry (one read per batch of notices) before
// it becomes a join or a leave, applies nothing older than what a read has
// shown, and reports a notice the registry contradicts (ErrUnconfirmedNotice).
//
// # Bad input
//
// Register refuses ids that would break a channel name, unknown roles and
// metadata over MaxMetadataBytes. Reads skip an entry that is not a
// ProcessInfo (not JSON, or the wrong shape) and report it once to
// Config.OnError, naming its field; they never fail because of it.
//
// # Not guaranteed
//
// lastSeen is written with each process's clock and compared with the
// master's, so SlaveTimeout must exceed the clock skew between hosts. The
// registry is not durable: after Redis loses its data each process is listed
// again at its next heartbeat, not before.
package registry
