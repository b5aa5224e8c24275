// Package rebalance spreads work items (camera subscriptions, display
// connections, queue partitions) over the slaves of a herd cluster by
// rendezvous hashing weighted by each slave's capabilities.
//
// Every item ranks every slave by a score computed from the item, the slave's
// id and the slave's weight alone, and goes to the best-ranked slave. So:
//
//   - The plan depends only on the items and the slaves, not on history or on
//     who computes it: a new master computes the plan its predecessor had,
//     and no assignment table needs to be stored.
//   - When a slave leaves, only its items move; each goes to its next-ranked
//     slave. When a slave joins, only the items it now ranks first move, all
//     to it. Raising one slave's weight moves items only to that slave.
//   - Each slave's expected share is its weight over the sum of weights.
//
// Weight is MaxSubscriptions × PreferredWorkload / 100. MaxSubscriptions is
// also a hard cap: an item whose best slave is full goes to the best slave
// with room, and an item for which no slave has room is left unassigned
// (Plan.Unassigned). While some cap binds, the movement guarantees above no
// longer hold exactly, since who is full depends on the other items.
//
//	plan, err := rebalance.Assign(cameras, slaves)
//	for _, s := range slaves {
//		send(s.ID, plan.Items(s.ID))
//	}
//	moved := rebalance.Moves(before, plan)
//
// The package is an example of herd's use, not part of the library: copy it.
package rebalance
