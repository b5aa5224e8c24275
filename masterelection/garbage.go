package masterelection

import (
	"context"
	"fmt"

	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

// foreignLock returns an error wrapping ErrGarbage when the lock key holds
// something other than a string: no process can take such a lock (the
// acquire script's SET NX fails on it) while the key exists, so an election
// on it cannot work. So does a term key that holds something other than a
// term below keyspace.MaxTerm, over which the acquire script writes nothing. It returns nil when the lock is free or a node id.
// answered is false when Redis did not answer (the election reports that
// itself; Start asks again once Redis answers the registry).
func (n *node) foreignLock(ctx context.Context) (garbage error, answered bool) {
	ctx, cancel := context.WithTimeout(ctx, n.opTimeout())
	defer cancel()
	st, err := rdb.Check(ctx, n.client, n.keys)
	return n.garbageIn(ctx, st, err)
}

// garbageIn is foreignLock's verdict on a check's answer (st, err), which
// Start's first round trip may have read already.
func (n *node) garbageIn(ctx context.Context, st rdb.MasterState, err error) (garbage error, answered bool) {
	if err != nil {
		return nil, false
	}
	if st.Exists && st.NodeID == "" {
		return n.lockHolds(ctx), true
	}
	if st.TermGarbage || st.Term >= keyspace.MaxTerm {
		// The acquire script writes nothing over it: once the lock is
		// free, no process can become master until an operator deletes it.
		what := st.Garbage
		if !st.TermGarbage {
			what = fmt.Sprintf("key %q holds %d (2^53 - 1): no term above it can be minted exactly", n.keys.Term, st.Term)
		}
		return fmt.Errorf("%w: %s: no process can become master while it does; "+
			"an operator who knows it is no other program's data deletes it (DEL %s)", ErrGarbage, what, n.keys.Term), true
	}
	return nil, true
}

// lockHolds describes the lock key when it does not hold a node id: the
// key, what it holds (its type, read with TYPE), and how an operator clears
// it.
func (n *node) lockHolds(ctx context.Context) error {
	what := "something that is not a node id"
	if typ, err := n.client.Type(ctx, n.keys.Master).Result(); err == nil && typ != "none" && typ != "string" {
		what = fmt.Sprintf("a %s, not a node id", typ)
	}
	return fmt.Errorf("%w: key %q holds %s: no process can become master while it does; "+
		"an operator who knows it is no other program's data deletes it (DEL %s)", ErrGarbage, n.keys.Master, what, n.keys.Master)
}
