// Package benchkit is what herd's two benchmark programs share: cmd/herdbench
// (`make bench`, herd against the PING round trip) and bench/peers (`make
// bench-peers`, herd against other election libraries). Both measure
// latencies into nearest-rank percentiles (Summarize), count a server's
// commands (ParseCommandStats), describe the machine (ThisMachine), print a
// table for a terminal and as markdown (WriteTextTable, WriteMarkdownTable,
// FormatDuration, FormatRatio), and write it into docs/performance.md
// between markers of their own, keeping the text around them
// (WriteMarkdown).
//
// It measures nothing itself and holds no state; every function is safe for
// concurrent use.
package benchkit
