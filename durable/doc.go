// Package durable routes messages from the master to its slaves through a
// durable inbox per slave, a Redis Stream, instead of pub/sub: a message the
// master sent is kept until the slave has handled it, across the slave's
// reconnections, restarts and death. It is the second transport beside
// package pubsub (which keeps the specification's at-most-once channels);
// docs/routing.md compares them.
//
// Keys (built by scripts.Keys; under Cluster they carry the lock's hash tag,
// so the fencing check and the write are one script on one slot):
//
//	<lockName>:inbox:<processId>   stream: the inbox of one slave
//	consumer group "herd"          (scripts.InboxGroup), consumer = process id
//
// Each entry holds t (the term it was written under), m (the JSON envelope
// of package pubsub: id, from, term, type, payload, sentAt) and, once moved,
// d (its deliveries before the move).
//
// Master side, with the election as leader and slave lister:
//
//	router, _ := durable.NewRouter(client, election, nil, durable.Config{})
//	id, err := router.Send(ctx, slaveID, "assign-camera", cam) // stored, or not
//	stop := router.ReassignOnRemoved(election, nil)            // a removed slave's work to the others
//	defer stop()
//
// Slave side:
//
//	c, _ := durable.NewConsumer(client, election.NodeID(), durable.Config{Terms: election})
//	c.Handle("assign-camera", func(ctx context.Context, d durable.Delivery) error {
//		// d.ID is the message id, d.Deliveries how many times it was delivered
//		return nil // acknowledges; an error leaves it to be delivered again
//	})
//	if err := c.Start(ctx); err != nil { ... }
//	defer c.Close()
//
// # Guarantees
//
//   - Send-side fencing: Router.Send and SendBatch add entries through the
//     inbox_send script, which checks the lock's holder and term as
//     pubsub's route script does, in the same atomic step as the XADD. A
//     deposed master adds nothing (ErrNotMaster and scripts.ErrFenced).
//     Reassign moves entries through inbox_move, fenced the same way.
//   - A nil error from Send means Redis stored the message. It stays in the
//     inbox until the slave's handler returned nil for it, or until
//     Reassign moved it to another inbox, where the same holds.
//   - At least once: every stored message is handled at least once, by
//     its slave or, after Reassign, by another, provided a slave consumes
//     the inbox it is in and Redis keeps its data (see Non-guarantees).
//     Handlers see the message id (the same on every delivery, also after
//     a move) and the delivery count, so they can be idempotent.
//   - A Consumer that starts again under the same process id first
//     handles the entries it had read and not acknowledged, then new ones.
//   - Order: a slave's new entries are handled in the order they were
//     stored; an entry whose handler failed is retried after
//     Config.RetryDelay, while later entries go on (so a retried entry is
//     handled after them).
//   - Receive-side fencing as in pubsub: an entry written under a term below
//     the highest the Consumer has seen is acknowledged and reported
//     (*pubsub.StaleTermError), never handled; a term above every verified
//     term costs one GET of the term key and is refused
//     (*pubsub.UnverifiedTermError) when Redis did not mint it.
//   - Bounded inboxes: an inbox holds at most Config.MaxLen unacknowledged
//     entries; a send beyond is refused with ErrInboxFull, never trimmed.
//
// # When a message is handled twice
//
// Exactly in these cases, each visible as Deliveries > 1 (except the last):
//
//   - the slave died, or lost Redis, after its handler returned nil and
//     before its acknowledgement reached Redis: it is delivered again to the
//     same process id after a restart, or to another slave after Reassign;
//   - the handler returned an error or panicked after doing part of the
//     work: it is delivered again after Config.RetryDelay;
//   - Reassign moved the entries of a slave that was still running (removed
//     by mistake: a partition longer than the registry's TTL): the entry it
//     was handling is handled by it and by the new owner;
//   - a Send whose reply was lost (a timeout, a dropped connection) and
//     that the caller sent again: two entries, two message ids.
//
// # Non-guarantees
//
//   - Not exactly once: see above.
//   - Entries of a deposed master that are still in an inbox are rejected
//     by a slave that has seen the newer term: the new master must send
//     again what it wants done (as with pubsub). Entries Reassign moves are
//     written under the mover's term and count as its own.
//   - Durability is Redis's: a Redis that loses its data (no persistence,
//     a failover to a replica that lacked the writes) loses the inboxes.
//   - An inbox whose slave never comes back and that nobody reassigns stays
//     in Redis: up to Config.MaxLen entries of envelope size plus about 100
//     bytes each. ReassignOnRemoved reassigns it when a slave appears;
//     scripts.Keys.InboxPattern finds inboxes left behind.
//
// # Goroutines
//
// Router starts none; ReassignOnRemoved runs on the goroutines of the
// election's event handlers. A Consumer runs one loop goroutine, started by
// Start and stopped and waited for by Close; handlers and OnError run on it,
// never concurrently with each other.
package durable
