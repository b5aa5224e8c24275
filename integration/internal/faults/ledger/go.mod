// The soak ledger is data, not code. This go.mod makes its folder a module
// of its own, so the herd module's zip (what `go get` downloads) leaves it
// out.
module github.com/herdkit/herd/integration/internal/faults/ledger

go 1.26.0
