package assign_test

import (
	"fmt"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/registry"
)

// Each slave holds its weight's share, within one; a slave leaving moves
// only its own cameras.
func ExampleAssign() {
	cameras := make([]string, 40)
	for i := range cameras {
		cameras[i] = fmt.Sprintf("cam-%02d", i+1)
	}
	slaves := []assign.Slave{
		{ID: "node-1", Capabilities: registry.Capabilities{MaxSubscriptions: 60, PreferredWorkload: 80}},
		{ID: "node-2", Capabilities: registry.Capabilities{MaxSubscriptions: 40, PreferredWorkload: 50}},
		{ID: "node-3", Capabilities: registry.Capabilities{MaxSubscriptions: 50, PreferredWorkload: 100}},
	}
	before, _ := assign.Assign(cameras, slaves)
	after, _ := assign.Reassign(before, cameras, slaves[:2]) // node-3 left

	fromNode3 := 0
	for _, m := range assign.Moves(before, after) {
		if m.From == "node-3" {
			fromNode3++
		}
	}
	fmt.Println("before:", before.Counts()["node-1"], before.Counts()["node-2"], before.Counts()["node-3"])
	fmt.Println("after: ", after.Counts()["node-1"], after.Counts()["node-2"], after.Counts()["node-3"])
	fmt.Println("moved:", len(assign.Moves(before, after)), "- all from node-3:", fromNode3 == before.Counts()["node-3"])
	fmt.Println("unassigned:", len(after.Unassigned))
	// Output:
	// before: 16 7 17
	// after:  28 12 0
	// moved: 17 - all from node-3: true
	// unassigned: 0
}
