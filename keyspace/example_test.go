package keyspace_test

import (
	"fmt"

	"github.com/herdkit/herd/keyspace"
)

// The names of one election's keys and channels, and a notice its scripts
// publish read back.
func Example() {
	k := keyspace.NewKeys("master-election", false)
	fmt.Println(k.Master, k.Term, k.Events)
	fmt.Println(k.SlaveChannel("node-1"))
	fmt.Println(keyspace.NewKeys("master-election", true).Master)

	n, err := keyspace.ParseNotice([]byte(`{"event":"acquired","nodeId":"node-1","term":7}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(n.Event, n.NodeID, n.Term, n.Lock())
	// Output:
	// master-election:master master-election:term master-election:events
	// worker:slave:node-1
	// {master-election}:master
	// acquired node-1 7 true
}

// LockNameOfTermKey finds the elections on a server from the keys a SCAN
// MATCH TermKeyPattern returns.
func ExampleLockNameOfTermKey() {
	for _, key := range []string{"master-election:term", "{orders}:term", "cache:term:x"} {
		name, ok := keyspace.LockNameOfTermKey(key)
		fmt.Printf("%s: %q %v\n", key, name, ok)
	}
	// Output:
	// master-election:term: "master-election" true
	// {orders}:term: "orders" true
	// cache:term:x: "" false
}

// ParseNotice refuses what herd's scripts never publish.
func ExampleParseNotice() {
	_, err := keyspace.ParseNotice([]byte(`{"event":"released","nodeId":"node-1"}`))
	fmt.Println(err)
	// Output:
	// keyspace: malformed notice "{\"event\":\"released\",\"nodeId\":\"node-1\"}": a released notice needs a positive term
}
