// Package route is the sending and fencing core that the two transports of
// routed messages share, so that each keeps only what differs: pubsub
// publishes through route.lua and route_batch.lua, durable stores through
// inbox_send.lua into per-slave streams.
//
// What they share:
//
//   - the envelope (pubsub.Message's wire form): CheckName, EncodePayload,
//     Stamp and the encoding behind them;
//   - the names a transport's Config resolves to (Names);
//   - the splitting of a batch into fenced script calls, and the outcome of
//     each message (Batch);
//   - the receiver's term fence and its verification against the term key
//     (Fence);
//   - the handlers by message type (Mux);
//   - the errors all of these return (errors.go), which pubsub exports under
//     the same names and durable reuses from pubsub.
//
// The package starts no goroutine; every type documents whether it is safe
// for concurrent use.
package route
