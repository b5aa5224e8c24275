package keyspace

// MaxTerm is the largest term and the largest registry version herd mints
// or accepts: 2^53 - 1, the largest integer a Lua number (a double) holds
// exactly, and JavaScript's Number.MAX_SAFE_INTEGER. The acquire script
// refuses a term key (Keys.Term) above it as garbage (writing nothing,
// naming the DEL to run), and at it, since no term can follow it exactly;
// the registry scripts count a version counter (Keys.ProcessesVersion) at
// or above it as none and mint from the server's clock.
const MaxTerm = 1<<53 - 1
