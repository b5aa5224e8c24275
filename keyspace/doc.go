// Package keyspace is herd's data in Redis as a user sees it: the names of
// an election's keys and channels (Keys), the notices its scripts publish on
// those channels (Notice, ParseNotice), the operator's requests to the
// master (ControlRequest), the largest term (MaxTerm), and the errors shared
// by every package of herd (ErrNotMaster, ErrFenced).
//
// Every name derives from the election's lock name, so an operator tool, a
// dashboard or a test can find an election's data from that name alone:
//
//	k := keyspace.NewKeys("master-election", false)
//	holder, err := client.Get(ctx, k.Master).Result()  // the master's node id
//	sub := client.Subscribe(ctx, k.Events)              // its lock notices
//	for msg := range sub.Channel() {
//		n, err := keyspace.ParseNotice([]byte(msg.Payload))
//		...
//	}
//
// With the lock name "master-election" the keys are the specification's
// ("master-election:master", "master-election:heartbeat", ...); under
// Redis Cluster (NewKeys with cluster true) the prefix is the hash tag
// "{master-election}", so every key of one election hashes to one slot.
//
// What it does not promise: herd writes these keys only through its own
// atomic scripts; a program that writes them itself breaks the election's
// guarantees. A notice is a hint to read Redis, never a fact by itself:
// anyone who may PUBLISH on the channels can send one. The notices are
// herd's own messages, not Redis's keyspace notifications.
//
// Nothing here does I/O, starts goroutines or keeps state; every value is
// safe for concurrent use.
package keyspace
