// Package bench measures herd against the physical limit of its Redis: a
// PING round trip taken in the same run. It is the library behind
// `make bench` (command herdbench, in cmd/herdbench), and its
// _test.go files hold the Go benchmarks of the per-operation rows, for
// benchstat comparisons:
//
//	go test -run '^$' -bench . -benchmem -count 10 ./cmd/herdbench/internal/bench > new.txt
//	benchstat old.txt new.txt
//
// # What it measures
//
// Per-operation rows (PING, the acquire, renew and check scripts) are Ops:
// Measure times every call one by one for percentiles, and Op.Bench runs
// the same call as a Go benchmark, reporting allocations, p50/p99 and the
// CPU time of this process per operation. Scenario rows (contended
// election, graceful handover, crash failover, routing, the durable
// backlog's adoption and failover, cost at rest, scale) start
// real MasterElections, each with its own client as separate processes
// would have, and time what a user would see: Start returning, the
// OnMasterAcquired handler being called.
//
// Every timing is a wall-clock interval on this process's monotonic clock;
// nothing here asserts a timing. Absolute times drift between runs on a
// shared machine, which is why each row is also given as a multiple of the
// PING round trip of the same run.
//
// # What it does not do
//
// It does not fake time, and it does not isolate the machine: the numbers
// include whatever else the machine was doing (the load average at the
// start of the run is recorded with them). Against a server given by
// REDIS_ADDR, the INFO-based rows (cost at rest, Redis CPU) also count
// other clients' commands.
package bench
