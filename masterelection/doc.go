// Package masterelection elects exactly one master among the processes that
// share a lock name on one Redis, and tells each process about every change
// of its role through typed events.
//
// # Usage
//
//	cfg := masterelection.Config{LockName: "billing"} // every other field: its default
//	m, err := masterelection.New(client, cfg)          // client made with ContextTimeoutEnabled: true
//	if err != nil { … }
//	m.OnMasterAcquired(func(ctx context.Context, term int64) {
//		runMasterWork(ctx, term) // until ctx is done: the mastership has ended
//	})
//	if err := m.Start(ctx); err != nil { … }
//	defer m.Stop(context.Background()) // releases the lock: a slave takes over at once
//
// # How it works
//
// The master holds the key <LockName>:master (its node id, with LockTTL) and
// renews it every HeartbeatInterval; slaves check it every CheckInterval and
// at the instant it would expire, and contend with an atomic SET NX when it
// is free. Acquire, renew, release and check are each one Lua script (package
// scripts). The scripts announce acquire and release on <LockName>:events, so
// a graceful Stop of the master is followed by a take-over in about one
// round trip, and a master whose lock was taken asks Redis at once (one
// renewal). A notice is only a hint to look at Redis sooner: anyone who may
// PUBLISH on the channel can send one, so no notice changes a role or a term
// by itself. Transfer hands the mastership to a named process.
//
// The slaves do not all contend at once: each master ranks its candidate
// slaves by a rendezvous hash of its term and keeps the first three in
// <LockName>:next, which the check reads. When that term's lock is free,
// the first-ranked contends at once, the next ones a quarter of
// ElectionJitter apart, the rest after those turns, at random within
// ElectionJitter, and a slave still
// waiting gives its turn up when another's acquired notice comes: one
// acquire per handover or failover, however many slaves.
//
// # A preferred master
//
// Config.Priority makes some processes preferred as master (a bigger
// machine, the zone next to Redis). The succession ranks candidates of
// higher priority first, so a crashed master is replaced by the highest
// priority it ranked. And a master hands over, with its own Transfer, to a
// candidate slave of higher priority than its own once it has seen that
// slave registered and heartbeating for HandBackWindow without a break:
// the highest such priority, ties by the succession's order. At most one
// such hand-back happens per HandBackWindow in the whole herd (the key
// <LockName>:handback), so a preferred process in a restart loop does not
// make the mastership flap. Equal priorities never hand over. A hand-back
// is a Transfer: the safety guarantees and failover bounds are Transfer's,
// and master-lost's step-down reason is StepDownTransferred.
//
// # Process registry and slave events
//
// Start also opens the process registry (package registry) on the same
// Redis: this process registers itself as soon as its role is known, again
// on every change of role, heartbeats its entry (every HeartbeatInterval as
// master, every CheckInterval as slave) and unregisters on Stop. While it is
// master it runs a registry.SlaveTracker, which turns the registry's notices
// on <LockName>:registry-events and a periodic sweep into slave-registered and
// slave-removed events, and removes slaves silent for longer than
// SlaveTimeout. The registry's reads are exposed here with the
// specification's meaning: Processes, Process, ProcessesByRole,
// MasterProcess, Slaves, Slave, SlaveCount, ProcessChannel.
//
// # Event handlers
//
// Every On… method (OnMasterAcquired, OnMasterLost, OnElectionStarted,
// OnElectionCompleted, OnSlaveRegistered, OnSlaveRemoved, OnError, OnEvent)
// registers a handler and returns the function that removes it. The rules
// are the same for all of them:
//
//   - Handlers run on a goroutine of their own, one per registration, never
//     on the election's loop: a slow or blocked handler never delays a
//     renewal or a check, and never delays the other handlers.
//   - One handler sees its events one at a time, in the order they
//     happened. Handlers of different events run independently: to see
//     several kinds of event in one order, use OnEvent. Events waiting for
//     a slow handler are queued without bound, except error events, of which
//     at most 1,024 wait per handler; further ones are dropped and counted
//     (DroppedErrors).
//   - A handler that panics is recovered; the panic is reported as an error
//     event wrapping ErrHandlerPanic (a panic in an OnError handler is only
//     logged).
//   - Registering after Stop has no effect. Unsubscribing drops the events
//     still queued for that handler.
//   - Stop waits, bounded by its ctx, for every handler to finish the events
//     already queued.
//
// # The fencing term
//
// Every acquisition mints a term: an integer greater than every term minted
// before on the lock name, also after Redis restarted without its data (the
// script takes the larger of the previous term + 1 and the server's clock in
// milliseconds). Term returns it while this process is master; it is carried
// by master-acquired and stored in <LockName>:master_process. A lock alone
// cannot stop a master that was paused (a long garbage collection, a
// partition) from acting after its lock expired and another master was
// elected: stamp the term on what the master writes or sends, and have the
// receivers refuse anything stamped with a term lower than the highest they
// have seen. Package pubsub does this for routed messages.
//
// # Self-fencing
//
// The master also fences itself: it keeps a deadline on the local monotonic
// clock, the send time of its last successful acquire or renew plus LockTTL
// minus StepDownMargin. Redis cannot have expired the lock before that
// instant, since the lock's TTL started no earlier than the send. When the
// deadline passes without a successful renewal, IsMaster and Term answer
// false and 0 at once (even before the loop has run, and even if Redis is
// unreachable) and master-lost is emitted. StepDownMargin absorbs the rate
// difference between this machine's clock and the Redis server's.
//
// # What is not guaranteed
//
// The guarantees hold for one Redis primary. Redis replicates
// asynchronously: when a primary fails over to a replica (Sentinel, Cluster),
// a lock written just before the failure can be lost, and a second master can
// be elected while the first still believes it holds the lock, for up to
// LockTTL - StepDownMargin. The term makes such a stale master's messages
// detectable; it does not prevent them. Redis pub/sub delivers at most once,
// so notices can be lost; polling covers every notice, which only make
// changes faster. A process stopped (SIGSTOP) or starved longer than LockTTL
// loses its mastership; code that acts as master must check IsMaster or use
// the ctx of OnMasterAcquired right before acting, and fence with the term.
//
// After a data loss (the term key, which has no TTL, is found missing) a
// process that has seen a term waits LockTTL before it contends, so that a
// master elected before the loss has fenced itself first; ErrDataLoss is
// reported. A process that never saw a term cannot tell a data loss from a
// new lock name and contends at once.
//
// Redis must not evict the election's keys. With maxmemory set, every
// maxmemory-policy but noeviction can delete a healthy master's lock, and a
// slave can then become master while the old master still acts, for up to
// LockTTL - StepDownMargin; allkeys-* policies can also delete the term key,
// which looks like a data loss. Start reads the policy once (INFO memory)
// and reports ErrEvictionPolicy; see docs/safety.md, "Eviction".
//
// # Goroutines
//
// Start runs one loop goroutine that owns every timer and Redis call of the
// election, one goroutine that reads the events channel, one for the
// registry entry (membership), one for the slave tracker while master, and
// one goroutine per event handler, which calls it for each queued event (see
// the On… methods). Stop ends them all.
package masterelection
