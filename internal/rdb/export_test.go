package rdb

// RouteBatchScript is route_batch.lua, for tests that call it with
// arguments the typed function never sends.
var RouteBatchScript = routeBatchScript

// InboxSendScript is inbox_send.lua with its prelude, for tests that call
// it with keys and arguments InboxSend never sends.
var InboxSendScript = inboxSendScript
