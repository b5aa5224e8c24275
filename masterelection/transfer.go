package masterelection

import (
	"context"
	"fmt"
	"time"

	"github.com/herdkit/herd/scripts"
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
// scripts.ControlRequest) that name its own term (or none) and a process
// with a live registry entry, unless Config.IgnoreRemoteTransfers.
func (m *MasterElection) Transfer(ctx context.Context, to string) error {
	if m.cfg.Standalone {
		return fmt.Errorf("masterelection: transfer: standalone mode has no other process: %w", ErrNotMaster)
	}
	if to != "" {
		if err := scripts.ValidateName("successor node id", to); err != nil {
			return fmt.Errorf("masterelection: transfer: %w", err)
		}
		if to == m.cfg.NodeID {
			return fmt.Errorf("masterelection: transfer: %q is this process", to)
		}
	}
	from := m.Term()
	if from == 0 {
		return ErrNotMaster
	}
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
	case <-m.core.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("masterelection: transfer: %w", ctx.Err())
	}
	return m.awaitSuccessor(ctx, to, from)
}

// awaitSuccessor waits until Redis shows a mastership after term from,
// and tells whether it is the one Transfer asked for.
func (n *node) awaitSuccessor(ctx context.Context, to string, from int64) error {
	poll := time.Millisecond
	for {
		st, err := scripts.Check(ctx, n.client, n.keys)
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("masterelection: transfer: waiting for the successor: %w", ctx.Err())
		case err != nil:
			// Redis unreachable for now: the hand-over itself is done.
		case st.Exists && st.Term > from:
			n.noteTerm(st.Term)
			if (to != "" && st.NodeID != to) || st.NodeID == n.cfg.NodeID {
				return fmt.Errorf("masterelection: transfer: %w: %q is master with term %d", ErrTransferNotTaken, st.NodeID, st.Term)
			}
			return nil
		}
		t := n.clock.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("masterelection: transfer: waiting for the successor: %w", ctx.Err())
		case <-t.C():
		}
		poll = min(2*poll, max(n.cfg.CheckInterval/8, time.Millisecond))
	}
}
