// Package operate is what the herd command does, apart from its flags and
// output: it connects to the Redis of a herd (Dial), reads what Redis shows
// of one lock name at one instant (Reader, Snapshot), follows it live
// (Watcher, with the failovers it measures), asks the master to hand over
// (StepDown), and lists, retries and drops the dead letters of durable
// routing (ListDead, RetryDead, DropDead, DropAllDead).
//
// Everything it reports comes from Redis: the lock (through the check
// script), the master's entry, the process registry (through package
// registry) and the server's clock. The notices of the events and
// registry-events channels are hints that make the Watcher read sooner;
// none is reported before a read confirms it, and a periodic read corrects
// whatever a lost or forged notice would have hidden.
//
// Errors that an operator can act on wrap one of the Err* values, each of
// which has its own exit status (ExitCode).
package operate
