// Package pubsub routes messages from the master to its slaves over Redis
// pub/sub, and reports from the slaves back to the master, with every routed
// message fenced by the master's term.
//
// Channels (names built by scripts.NewKeys and Config):
//
//	worker:slave:<processId>      master -> one slave   (Router.Send, Router.Broadcast)
//	<lockName>:master-inbox       slaves -> master      (Subscriber.ReportToMaster, Inbox)
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
// Slave side:
//
//	sub, _ := pubsub.NewSubscriber(client, election.NodeID(), pubsub.Config{OnError: logErr})
//	sub.Handle("assign-camera", func(ctx context.Context, m pubsub.Message) error { ... })
//	if err := sub.Start(ctx); err != nil { ... }
//	defer sub.Close()
//
// # Guarantees
//
//   - Order: a Subscriber hands messages to its handlers one at a time, in
//     the order Redis executed the PUBLISH commands. Messages from one
//     Router, sent one after another, arrive in the order sent.
//   - Fencing: a Subscriber rejects every message whose term is lower than
//     the highest master term it has seen (from messages, from "acquired"
//     and "released" notices on the events channel, from the term key read
//     at Start and after each reconnect, and from ObserveTerm). The notices
//     share the connection of the messages, so a message published after a
//     takeover notice is judged against the new term. Rejections are counted
//     (Rejected) and reported (*StaleTermError).
//   - A bad message (malformed, oversized, unknown type, failing or panicking
//     handler) is reported through Config.OnError and skipped; it never
//     stops the loop. Bad input to the senders is refused with an error
//     before anything is published.
//   - Router.Send returns *NoSubscriberError when Redis had no subscriber
//     for the channel.
//
// # Non-guarantees
//
//   - Delivery is at most once. Redis pub/sub keeps nothing: a message
//     published while the slave is disconnected, restarting or too slow
//     (Redis drops a subscriber whose output buffer passes its
//     client-output-buffer-limit) is lost, and a nil error from Send does not
//     mean the slave handled it. Work that must not be lost needs an
//     acknowledgement (for example a report back) and a retry by the master.
//   - Fencing is on the receiving side only: Redis accepts the PUBLISH of a
//     stale master, and a slave that has not yet seen the new term (it was
//     disconnected when the notice went out and has not reconnected) accepts
//     the stale message.
//   - No ordering across publishers, and none between a Router's messages
//     and the same master's Broadcast pipeline sent concurrently.
//
// # Goroutines
//
// Router starts none. Subscriber and Inbox each run one loop goroutine,
// started by Start and stopped and waited for by Close. Handlers and
// OnError run on that goroutine, never concurrently with each other.
// go-redis redials and resubscribes after a lost connection; the loop waits
// between attempts (Config.MaxRetryDelay) and detects a silently dead
// connection with PING (Config.PingInterval).
package pubsub
