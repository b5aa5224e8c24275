// Package integration holds herd's tests against real Redis-compatible
// servers started by the tests themselves (see internal/testkit/redistest): the
// election, the registry and routing on every server of the matrix, and the
// fault-injection suite. It has no non-test code of its own beyond this
// comment; run it with `go test ./integration/`.
package integration
