// Package pubsub routes messages from the master to its slaves over Redis
// pub/sub, and reports from the slaves back to the master, with every routed
// message fenced by the master's term twice: when it is sent and when it is
// received.
//
// Channels (names built by keyspace.NewKeys and Config):
//
//	worker:slave:<processId>      master -> one slave   (Router.Send, Router.Broadcast, via route.lua;
//	                                                     Router.SendBatch, via route_batch.lua)
//	<lockName>:master-inbox       slaves -> master      (Subscriber.ReportToMaster, Reports)
//	<lockName>:events             election notices      (read by Subscriber for terms)
//
// Every message is a JSON envelope (Message): id, from, term, type, payload,
// sentAt; docs/routing.md specifies it for processes written in other
// languages.
//
// Master side:
//
//	router, _ := pubsub.NewRouter(client, election, registry, pubsub.Config{})
//	err := router.Send(ctx, slaveID, "assign-camera", cam)
//	var gone *pubsub.NoSubscriberError
//	if errors.As(err, &gone) {
//		// nobody got it: give the work to another slave
//	}
//
// Many messages at once, one round trip per MaxBatchChunk of them:
//
//	res, err := router.SendBatch(ctx, []pubsub.Outgoing{
//		{SlaveID: "s1", Type: "assign-camera", Payload: cam1},
//		{SlaveID: "s2", Type: "assign-camera", Payload: cam2},
//	})
//	// err: the batch stopped (not master, fenced, Redis); res.Outcomes[i]:
//	// message i's id and fate; pubsub.NoSubscribers(res.Err()): reassign
//
// Slave side:
//
//	sub, _ := pubsub.NewSubscriber(client, election.NodeID(), pubsub.Config{
//		Terms:   election,             // the terms the election sees fence messages too
//		Holds:   election.HoldsNodeID, // a twin refused handles nothing
//		OnError: logErr,
//	})
//	sub.Handle("assign-camera", func(ctx context.Context, m pubsub.Message) error { ... })
//	if err := sub.Start(ctx); err != nil { ... }
//	defer sub.Close()
//
// # Guarantees
//
//   - Order: a Subscriber hands messages to its handlers one at a time, in
//     the order Redis executed the PUBLISH commands. Messages from one
//     Router, sent one after another, arrive in the order sent.
//   - Send-side fencing: Router.Send and Router.Broadcast publish through
//     the route script (rdb.Route), which compares the lock's holder and
//     term with this process's node id and the term stamped on the message
//     and publishes only when both match: the check and the PUBLISH are one
//     atomic step on the server, in one round trip (one script call for
//     each chunk of up to MaxBatchChunk slaves of a Broadcast, or messages
//     of a SendBatch, all stamped with one term). A master that lost its
//     lock without knowing it
//     (expired, taken over, elected again under a newer term, lost with
//     Redis's data) publishes nothing, and gets an error matching both
//     ErrNotMaster and keyspace.ErrFenced.
//   - Receive-side fencing, for what still gets past the route script (a
//     message already on its way when the slave learnt a newer term, a Redis
//     that lost the new master's writes or still takes the old master's
//     calls during a fail-over, a sender that bypasses herd with a plain
//     PUBLISH): a Subscriber rejects every message whose term is lower than
//     the highest master term it has seen (from messages, from "acquired"
//     and "released" notices on the events channel, from the term key read
//     at Start and after each reconnect, from ObserveTerm, and from
//     Config.Terms, which *masterelection.MasterElection implements with
//     ObservedTerm). The notices share the connection of the messages, so a
//     message published after a takeover notice is judged against the new
//     term. Rejections are counted (Rejected) and reported
//     (*StaleTermError).
//   - Terms are verified: a term from a notice or message raises the fence
//     only when Redis confirms it. A term above every term the Subscriber
//     has verified costs one GET of the term key (one per new term, not per
//     message; bounded by Config.OpTimeout); when the key holds less, is
//     missing or cannot be read, the message is not handled, the fence does
//     not move, and the refusal is counted (Unverified) and reported
//     (*UnverifiedTermError, ErrUnverifiedTerm). So a forged PUBLISH cannot
//     lift the fence above the terms Redis has minted and shut out the real
//     master. Config.Terms and ObserveTerm are trusted as verified.
//   - One connection per client: every Subscriber and Reports of a
//     go-redis client, and the elections on it, share one pub/sub
//     connection (under Redis Cluster, one per election hash tag); each receiver has its own goroutine and backlog, so a slow
//     handler delays only its own receiver.
//   - A bad message (malformed, oversized, unknown type, failing or panicking
//     handler) is reported through Config.OnError and skipped; it never
//     stops the loop. Bad input to the senders is refused with an error
//     before anything is published.
//   - What to alert on: ErrConnection (each failed reconnect),
//     ErrBacklogFull (messages dropped), *UnverifiedTermError (a forged
//     term, or Redis lost its data). Watch the rate of *MessageError (the
//     handlers' own failures) and of *StaleTermError: a message of a
//     replaced master dropped by the fence, a few of which are expected at
//     each master change (pub/sub delivers at most once).
//   - Router.Send returns *NoSubscriberError when Redis had no subscriber
//     for the channel; Router.SendBatch reports it per message.
//   - Router.SendBatch publishes in the order of the batch. A batch of
//     several calls can stop part way: the calls before were published,
//     the ones after were not (ErrNotSent), and a call that failed in flight
//     has an unknown outcome; see SendBatch and docs/routing.md.
//
// # Non-guarantees
//
//   - Delivery is at most once. Redis pub/sub keeps nothing: a message
//     published while the slave is disconnected or restarting is lost, and
//     so is one that arrives while its handlers are Config.MaxBacklog bytes
//     behind (reported as ErrBacklogFull); a nil error from Send does not
//     mean the slave handled it. Work that must not be lost needs an
//     acknowledgement (for example a report back) and a retry by the master.
//   - The route script trusts the Redis it runs on: where that Redis lacks
//     the new master's writes, the stale master publishes, and only slaves
//     that have seen the newer term reject it. A slave that has not (it was
//     disconnected when the notice went out, has not reconnected, and its
//     Config.Terms has not seen it either) accepts a stale message that got
//     past the route script.
//   - Envelopes and notices are not signed: a forged message carrying a
//     term Redis has minted (the current master's) is accepted. Keep other
//     clients off herd's channels with an ACL (docs/safety.md).
//   - No ordering across publishers, and none between calls of one Router
//     made concurrently. Concurrent Send calls are not coalesced into
//     batches: batching is explicit (SendBatch).
//
// # Goroutines
//
// Router starts none. Subscriber and Reports each run one loop goroutine,
// started by Start and stopped and waited for by Close. Handlers and
// OnError run on that goroutine, never concurrently with each other.
// go-redis redials and resubscribes after a lost connection; the loop waits
// between attempts (Config.MaxRetryDelay) and detects a silently dead
// connection with PING (Config.PingInterval).
package pubsub
