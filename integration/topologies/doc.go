// Package topologies tests herd on Redis deployments beyond one server,
// built by the tests from the server binaries (internal/testkit/redistest): a Redis
// Cluster of three masters (with and without replicas) and a Sentinel
// deployment (a primary, a replica, three sentinels). On each it checks the
// election, the registry and routing, graceful handover, a crashed herd
// master, and the failover of the Redis node that holds herd's keys, whose
// recovery time it measures and logs. It also checks a least-privileged ACL
// user and measures the cost of WAIT after a write.
//
// The tests take minutes, so they sit behind the build tag topologies:
//
//	make test-topologies
//	go test -race -count=1 -tags topologies ./integration/topologies/
//
// Without the tag this package has no code but this comment.
package topologies
