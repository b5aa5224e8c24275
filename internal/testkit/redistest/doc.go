// Package redistest starts and controls real Redis-compatible servers for
// herd's tests, and hands out miniredis instances for fast unit tests.
//
// It is imported only from _test.go files. A typical integration test:
//
//	func TestRenew(t *testing.T) {
//		redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
//			inst := redistest.Start(t, s)
//			c := inst.Client(t)
//			// ... exercise herd against c; inst.Restart(t), inst.Pause(t) ...
//		})
//	}
//
// # The server matrix
//
// Servers returns `redis-server` from PATH plus every executable listed in
// the colon-separated HERD_REDIS_SERVERS variable, each named from its
// `--version` output ("redis-7.0.15", "redis-8.0.6", "valkey-9.1.2"). When
// none is found the test is skipped, unless HERD_REQUIRE_REDIS=1, in which
// case it fails: CI sets it so that a missing server can never pass silently.
//
// # Guarantees
//
//   - Every server listens on 127.0.0.1 on a port of its own, runs in its own
//     temporary directory, and persists nothing (--save "" --appendonly no).
//   - Start returns only once the server answers, and only once the server
//     answering is the process Start launched (checked by process_id), so a
//     port taken by another test between selection and bind is retried.
//   - Every process is killed and reaped by a t.Cleanup registered by Start,
//     which runs even after t.Fatal or a panic in the test. On Linux the
//     process is also bound to the test binary (SIGKILL when it dies), so a
//     test binary killed by -timeout does not leave a server behind.
//   - A server's stdout and stderr are kept (the last 64 KiB) and printed when
//     it fails to start, dies unexpectedly, or the test fails.
//
// The processes themselves are started by package redisproc, which the
// benchmark programs share; redistest adds what a test needs on top: a
// server matrix, t.Cleanup, failures reported on t, and Restart, Stop,
// Kill, Pause and Resume.
//
// Non-guarantees: nothing here fakes time, and nothing bounds how long the
// server takes to answer a command once started; tests should bound their
// own calls with a context deadline (every client made here has
// ContextTimeoutEnabled set, so go-redis honours it).
//
// All functions are safe for concurrent use; an Instance may be used from
// several goroutines, but its control methods (Restart, Stop, Kill, Pause,
// Resume) are serialised.
package redistest
