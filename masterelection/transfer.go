package masterelection

import (
	"context"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

// Transfer hands mastership over on purpose, for maintenance of this
// process, say. The master cancels its OnMasterAcquired handlers' ctx (they
// get up to HeartbeatInterval to return, as at Stop), turns IsMaster false,
// releases the lock and reserves it in Redis for the node to, for
// TransferWindow: only that node can acquire it meanwhile (this one
// included), and the release notice makes it contend at once. This process
// stays a candidate. When to does not take the lock by then
// (dead, or not a candidate), the normal election resumes.
//
// Transfer(ctx, "") is a plain step-down: no reservation, the others contend
// at once, and this process holds off for TransferWindow.
//
// Transfer returns once another process is master, as Redis shows it: nil
// when that is to (any process, when to is ""), an error wrapping
// ErrTransferNotTaken when another process took it. It returns ErrNotMaster
// when this process is not master, and ctx's error when ctx ends first (the
// hand-over goes on). Terms only grow: the successor's term is larger.
//
// The master also honours requests on the control channel
// (<lock>:control, {"request":"transfer","to":"<node id>","term":<term>},
// keyspace.ControlRequest) that name its own term (or none) and a process
// with a live registry entry, unless Config.IgnoreRemoteTransfers.
func (m *MasterElection) Transfer(ctx context.Context, to string) error {
	if err := m.validSuccessor(to); err != nil {
		return err
	}
	from := m.Term()
	if from == 0 {
		return ErrNotMaster
	}
	if err := m.requestTransfer(ctx, to); err != nil {
		return err
	}
	return m.awaitSuccessor(ctx, to, from)
}

// validSuccessor checks Transfer's to: a valid node id other than this
// process's, or "" (any slave); standalone mode has no other process.
func (m *MasterElection) validSuccessor(to string) error {
	switch {
	case m.cfg.Standalone:
		return fmt.Errorf("masterelection: transfer: standalone mode has no other process: %w", ErrNotMaster)
	case to == "":
		return nil
	case to == m.cfg.NodeID:
		return fmt.Errorf("masterelection: transfer: %q is this process", to)
	}
	if err := keyspace.ValidateName("successor node id", to); err != nil {
		return fmt.Errorf("masterelection: transfer: %w", err)
	}
	return nil
}

// requestTransfer hands the request to the election loop and waits for its
// answer: the mastership ended and the lock was released for to.
func (m *MasterElection) requestTransfer(ctx context.Context, to string) error {
	req := transferRequest{to: to, done: make(chan error, 1)}
	select {
	case m.core.transfers <- req:
	case <-m.core.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("masterelection: transfer: %w", ctx.Err())
	}
	select {
	case err := <-req.done:
		if err != nil {
			return fmt.Errorf("masterelection: transfer: %w", err)
		}
		return nil
	case <-m.core.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("masterelection: transfer: %w", ctx.Err())
	}
}

// awaitSuccessor waits until Redis shows a mastership after term from,
// and tells whether it is the one Transfer asked for. It asks Redis at
// once, then at each acquired notice (the successor's, in the common case:
// one round trip after it), and, should notices be lost (or the user may
// not subscribe), every CheckInterval/8.
func (n *node) awaitSuccessor(ctx context.Context, to string, from int64) error {
	poll := max(n.cfg.CheckInterval/8, time.Millisecond)
	for {
		claimed := n.claims.wait()
		st, err := rdb.Check(ctx, n.client, n.keys)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("masterelection: transfer: waiting for the successor: %w", ctx.Err())
		}
		// An error while ctx lasts: Redis unreachable for now; the
		// hand-over itself is done.
		if err == nil && st.Exists && st.Term > from {
			return n.successorIs(st, to)
		}
		t := n.clock.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("masterelection: transfer: waiting for the successor: %w", ctx.Err())
		case <-claimed:
		case <-t.C():
		}
		t.Stop()
	}
}

// successorIs tells whether the master of st, the first after the
// transfer, is the one Transfer asked for (to, or any other process).
func (n *node) successorIs(st rdb.MasterState, to string) error {
	n.noteTerm(st.Term)
	if (to != "" && st.NodeID != to) || st.NodeID == n.cfg.NodeID {
		return fmt.Errorf("masterelection: transfer: %w: %q is master with term %d", ErrTransferNotTaken, st.NodeID, st.Term)
	}
	return nil
}
