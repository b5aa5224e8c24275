// Package redisproc runs Redis-compatible server processes (redis-server,
// valkey-server, sentinels) on 127.0.0.1 for herd's harnesses: redistest
// builds the tests' instances on Spawn, and the benchmark programs
// (cmd/herdbench, bench/peers) start their servers with Start. It does not
// import testing: it returns errors and leaves reporting them to the caller.
//
//	s, err := redisproc.Start(ctx, "redis-server")
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//	c := redis.NewClient(&redis.Options{Addr: s.Addr})
//
// # Guarantees
//
//   - A process counts as started only once the server answering on its
//     port is that process (INFO server's process_id): when another program
//     took the port between FreePort and the bind, Spawn says so with
//     ErrPortInUse instead of handing out someone else's server.
//   - A process that Spawn gives up on has been killed and reaped.
//   - On Linux every process gets SIGKILL when the thread that started it
//     exits (SysProcAttr), which for a Go program is when the program
//     exits, even when it is killed: no server outlives its harness.
//
// Non-guarantees: nothing here bounds how long a started server takes to
// answer a command; callers bound their own calls.
//
// All functions are safe for concurrent use, and so are the methods of a
// Proc and of a Server.
package redisproc
