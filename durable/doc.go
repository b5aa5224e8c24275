// Package durable routes messages from the master to its slaves through a
// durable inbox per slave, a Redis Stream, instead of pub/sub: a message the
// master sent is kept until the slave has handled it, across the slave's
// reconnections, restarts and death. It is the second transport beside
// package pubsub (which keeps the specification's at-most-once channels);
// docs/routing.md compares them.
//
// Keys (built by keyspace.Keys; under Cluster they carry the lock's hash tag,
// so the fencing check, the registry check and the write are one script on
// one slot):
//
//	<lockName>:inbox:<processId>   stream: the inbox of one slave
//	consumer group "herd"          (keyspace.InboxGroup), consumer = process id
//	<lockName>:inboxes             set: the process ids that have an inbox
//	<lockName>:dead                stream: the dead letters
//
// Each entry holds t (the term it was written under), m (the JSON envelope
// of package pubsub: id, from, term, type, payload, sentAt) and, once moved
// or adopted, d (its deliveries before).
//
// One program runs on every process, master or slave, for its whole life:
// the election decides which part acts, so no part is started or stopped
// when the role changes. The election is the Router's Mastership, slave lister
// and events, and the Consumer's term source:
//
//	election, _ := masterelection.New(client, masterelection.Config{})
//	router, _ := durable.NewRouter(client, election, nil, durable.Config{})
//	stop := router.Maintain(election, nil) // sweeps while this process is master
//	defer stop()
//	c, _ := durable.NewConsumer(client, election.NodeID(), durable.Config{Terms: election, Holds: election.HoldsNodeID})
//	c.Handle("assign-camera", func(ctx context.Context, d durable.Delivery) error {
//		// d.ID is the message id, d.Deliveries how many times it was delivered
//		return nil // acknowledges; an error retries it, up to Config.MaxDeliveries
//	})
//	if err := c.Start(ctx); err != nil { ... }
//	defer c.Close()
//	if err := election.Start(ctx); err != nil { ... }
//	// Wherever the application acts as master (OnMasterAcquired, RunIfMaster):
//	id, err := router.Send(ctx, slaveID, "assign-camera", cam) // stored, or an error
//
// The master needs no Consumer, and may keep it: what its inbox holds
// (sent to it while it was a slave) moves to the live slaves, as the inbox
// of a process gone does, and a Send to the master itself is refused
// (ErrMasterInbox). A Consumer kept on the master, with Config.Terms set to
// the election, handles none of the moved entries but the one in its hands
// when the mastership began. A live slave whose inbox no Consumer reads is
// not refused at Send: its entries wait until it leaves the registry or
// becomes master, then move.
//
// # The guarantee
//
// A message whose Send (or SendBatch outcome) returned nil is handled: some
// slave's handler returns nil for it, or, after Config.MaxDeliveries
// failed deliveries, it is in the dead-letter stream until an operator
// retries or drops it (DeadLetters; herd dead). This holds across slave
// crashes and restarts, lost replies, master changes and removals,
// provided that:
//
//   - the master runs Router.Maintain (or calls Router.Sweep), so a new
//     master adopts what its predecessors stored and moves the inboxes of
//     processes that left the registry; without any master, entries wait;
//   - some live slave runs a Consumer (entries wait for one otherwise;
//     those of a slave that runs none wait until it leaves the registry or
//     becomes master, then move);
//   - Redis keeps its data (no persistence, or a failover to a replica that
//     lacked the writes, loses the inboxes with everything else);
//   - the application did not ask for the loss: Config.DropBacklog deletes
//     the predecessors' backlog, counted in Swept.Dropped.
//
// How each step keeps it:
//
//   - Send-side fencing: Router.Send and SendBatch add entries through
//     inbox_send.lua, which checks the lock's holder and term, as pubsub's
//     route script does, and that the slave is a live process in the
//     registry, in the same atomic step as the XADD. A deposed master adds
//     nothing (ErrNotMaster and keyspace.ErrFenced); a send to a process
//     that never registered or has left is refused (ErrNotRegistered), so
//     nothing is stored where no process will read it.
//   - Adoption: an entry written under a term older than the highest the
//     Consumer has seen is never handled under that term: the Consumer
//     acknowledges it without deleting it and counts it (Rejected,
//     Config.OnStale; no error). The next master's Sweep adds every entry of
//     an older term again at the end of its inbox under its own term, with
//     its message id and delivery count, and the Consumer handles it then
//     (the master's own inbox moves to the slaves instead).
//     The first Send or SendBatch of a mastership waits for that step, so
//     in each inbox the adopted entries come before the new master's own.
//   - Removed slaves: Sweep moves the entries of every inbox whose process
//     is not live in the registry, and of the master's own inbox, to the
//     live slaves (Reassign, one fenced script per batch) and deletes the
//     emptied inbox; Maintain sweeps at
//     master-acquired, at each slave event and every Config.SweepInterval,
//     so an inbox whose slave left between a send and its handling moves
//     within SweepInterval of the end of its grace: Config.Grace after the
//     removal, during which a process restarted under the same id reads
//     its own inbox and nothing moves (Swept.Waiting).
//   - Lost replies: a Consumer looks at its pending list every
//     Config.RetryDelay and after every read error, and takes back what is
//     due, so an entry Redis delivered whose reply never arrived is handled
//     within 2 × RetryDelay (plus the handling of the entries ahead of it).
//   - Failing handlers: a failed delivery is retried after RetryDelay,
//     doubled at each retry up to Config.MaxRetryDelay; after
//     MaxDeliveries deliveries the entry moves to the dead-letter stream with
//     its last error (Config.OnDead, Consumer.Dead). An entry that always
//     fails (a poison message) dead-letters the sum of its backoffs after
//     its first delivery: with M = MaxDeliveries, R = RetryDelay and
//     Rmax = MaxRetryDelay, T = min(R, Rmax) + min(2R, Rmax) + … +
//     min(2^(M−2)·R, Rmax), plus up to R per retry (the pending pass that
//     takes it back runs every R) and the handler's own time. With the
//     defaults (10, 1s, 30s): 1+2+4+8+16+4×30 = 151 s, at most about
//     160 s. Entries behind it go on meanwhile.
//   - Receive-side fencing as in pubsub: a slave never handles an entry under
//     a term below one it has seen; a term above every verified term costs
//     one GET of the term key and is refused (*pubsub.UnverifiedTermError,
//     acknowledged and deleted) when Redis did not mint it.
//   - Bounded inboxes: an inbox holds at most Config.MaxLen entries; a send
//     beyond is refused with ErrInboxFull, never trimmed.
//   - Order: a slave's entries are handled in the order they were stored,
//     adopted entries of a master change before the new master's own; an
//     entry whose handler failed is retried after the entries behind it.
//
// # When a message is handled twice
//
// Delivery is at least once. Exactly in these cases, each visible as
// Deliveries > 1 (except the last):
//
//   - the slave died, or lost Redis, after its handler returned nil and
//     before its acknowledgement reached Redis: it is delivered again to the
//     same process id after a restart, or to another slave after a move;
//   - the handler returned an error or panicked after doing part of the
//     work: it is delivered again after its backoff;
//   - a move or an adoption took an entry its slave was handling at that
//     moment (a slave removed by mistake during a partition longer than the
//     registry's TTL; a slave that had not yet heard of the new master; the
//     entry a new master's Consumer was handling when its own inbox moved):
//     it is handled by the old handling and again after the move;
//   - a Send whose reply was lost (a timeout, a dropped connection) and
//     that the caller sent again: two entries, two message ids.
//
// # What to alert on
//
// Config.OnError is called only when something needs a look; a graceful
// master change, an adoption, a redelivery after a lost reply call it
// never (they show in the counters, the metrics of package metrics and the
// debug log of Config.Logger). It receives:
//
//   - *pubsub.MessageError: an entry that could not be handled (malformed,
//     no handler for its type, the handler failed or panicked); a failing
//     entry comes again, and dead-letters after MaxDeliveries (OnDead);
//   - *pubsub.UnverifiedTermError: an entry whose term Redis never minted
//     (a forgery, or a data loss: ErrTermMissing), or whose term could not
//     be checked twice in a row (Err says why);
//   - pubsub.ErrConnection: a Redis call that failed twice in a row (a
//     single failure healed by the next call is logged at debug level);
//   - from Router.Maintain: a sweep that failed, or inboxes left with no
//     slave to take them (ErrNoSlaves, reported once).
//
// Alert on any dead letter (OnDead, Consumer.Dead), on ErrConnection, on
// UnverifiedTermError; watch the rate of MessageError, which is your
// handlers' own.
//
// # Goroutines
//
// Router starts none of its own but Maintain's: one goroutine per
// mastership while Maintain runs, ended with the mastership or by the
// function Maintain returns. A Consumer runs one loop goroutine, started by
// Start and stopped and waited for by Close; handlers, OnError, OnStale and OnDead
// run on it, never concurrently with each other.
package durable
