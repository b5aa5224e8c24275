// Package faults is herd's fault-injection suite: it runs real node
// processes (integration/node) against real Redis servers, breaks things
// from a seeded random schedule (kill -9, SIGSTOP of the master and of a
// slave, Redis restarted without data or paused, latency, blackholes and
// resets between one node and Redis through toxiproxy, replies to one
// slave's Consumer lost, a burst of durable messages just before the
// master is killed, graceful stops and restarts, a twin started under the
// node id of a live process; a fault may stay in force
// while others are played, and composites such as FaultHandoverLoss play a
// fixed overlap), collects every
// process's records into one history on the system-wide CLOCK_MONOTONIC, and
// checks the history (Check): no two masters act at the same instant, no ctx
// handed out for a mastership outlives it, a crashed master is replaced
// within its bound, terms only grow, stale messages are rejected,
// membership changes are reported once, a twin is refused and works
// nothing, and every message stored by durable
// routing is handled, none under a stale term (duplicates counted). Before
// its final accounting each schedule stops the durable sends and drains the
// inboxes (bounded), so a message still in an inbox at the end is lost.
//
// The package's non-test code is the record format shared with the node
// program (Record, Now) and the checkers (Check, WriteTimeline); the
// harness and the schedules are in its tests:
//
//	go test ./integration/internal/faults/                       # one tour of every fault kind
//	HERD_FAULTS_SEED=42 go test ./integration/internal/faults/   # replay a schedule
//	make soak SOAK_SCHEDULES=50                         # 50 random schedules added to the soak ledger
//
// docs/safety.md states the guarantees these tests check; docs/testing.md why the
// measurement is sound.
package faults
