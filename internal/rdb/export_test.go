package rdb

// RouteBatchScript is route_batch.lua, for tests that call it with
// arguments the typed function never sends.
var RouteBatchScript = routeBatchScript
