// Package subhub shares one pub/sub connection among every subscription
// made on one go-redis client: the election's notice feed, the master's
// registry tracker, every pubsub.Subscriber and pubsub.Reports of a process
// hold one connection to Redis, not one each.
//
//	sub, err := subhub.Subscribe(ctx, client, subhub.Options{
//		Channels:  []string{"lock:events"},
//		OnMessage: func(ctx context.Context, m *redis.Message) { … },
//	})
//	…
//	sub.Close()
//
// The hub of a client is made by its first subscription and closed with its
// last. Under a *redis.ClusterClient there is one hub per client and hash
// slot of a subscription's first channel, and its connection goes to the
// node serving that slot: a PUBLISH counts the receivers of its own node
// only, so a subscriber that must be counted (pubsub's) subscribes there.
//
// One goroutine per hub reads the connection and hands each message to the
// subscriptions of its channel. Channels are counted: the server is sent
// SUBSCRIBE for the first holder of a channel and UNSUBSCRIBE after its
// last.
//
// # Guarantees
//
//   - Subscribe returns once the server has confirmed every channel of the
//     subscription (at once for channels another subscription holds
//     confirmed already), or when ctx ends, and then it has removed what it
//     added.
//   - The callbacks of one subscription are called one at a time, in the
//     order the connection delivered what they report; none is called after
//     Close returned.
//   - A slow subscription never delays another: a queued subscription
//     (Options.Inline false) has a goroutine and a queue of its own, bounded
//     by Options.MaxQueue bytes; a message that does not fit is dropped and
//     counted to OnDropped. An inline subscription's callbacks run on the
//     reader and must not block.
//   - The reader sends PING after the smallest PingInterval any
//     subscription asked for without traffic, and replaces a connection
//     that did not answer it within another interval; it reconnects after
//     every error, waiting 10 ms doubling to the smallest MaxRetryDelay.
//     Each failure goes to every running subscription's OnError, and once
//     the new connection is subscribed each subscription's OnSubscribed is
//     called again for each of its channels. A channel the server refuses
//     (ACL) costs only the subscription that asked for it: the connection
//     stays, and the other channels are subscribed one by one after a
//     reconnection.
//
// # Non-guarantees
//
//   - Delivery is at most once, as with any Redis pub/sub: what is
//     published while the connection is down, and what a full queue drops,
//     is lost.
//   - Patterns (PSUBSCRIBE) and shard channels (SSUBSCRIBE) are not
//     supported.
package subhub
