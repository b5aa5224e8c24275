package masterelection

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/herdkit/herd/scripts"
)

// transferRequest asks the master loop to hand over to a successor ("" for
// none).
type transferRequest struct {
	to     string
	done   chan error // Transfer's answer; nil for a request from the control channel or a hand-back
	reason string     // why the mastership ends, when not the plain "transferred to <to>"
}

func (r transferRequest) reply(err error) {
	if r.done != nil {
		r.done <- err
	}
}

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
	case m.transfers <- req:
	case <-m.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("masterelection: transfer: %w", ctx.Err())
	}
	select {
	case err := <-req.done:
		if err != nil {
			return fmt.Errorf("masterelection: transfer: %w", err)
		}
	case <-m.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("masterelection: transfer: %w", ctx.Err())
	}
	return m.awaitSuccessor(ctx, to, from)
}

// transferOut ends mastership l for a transfer request: as handOver, with
// the released lock reserved for req.to. The answer goes to req.
func (m *MasterElection) transferOut(ctx context.Context, ls *loopState, l *mastership, req transferRequest) {
	window := m.cfg.TransferWindow
	wait := min(m.cfg.HeartbeatInterval, max(m.remaining(l, m.clock.Now()), time.Millisecond))
	reason := "transferred: stepped down"
	if req.to != "" {
		reason = "transferred to " + req.to
	}
	if req.reason != "" {
		reason = req.reason
	}
	released, err := m.resign(ctx, l, wait, reason, req.to, window)
	if released {
		ls.lockGone()
		if req.to == "" {
			// No reservation keeps this process from taking the lock
			// straight back: it holds off itself.
			ls.holdOff = m.clock.Now().Add(window)
		}
	} else if err == nil {
		err = ErrNotMaster // the lock was gone already: nothing to hand over
	}
	if err != nil {
		m.emitError(fmt.Errorf("transfer: %w", err))
	}
	req.reply(err)
}

// awaitSuccessor waits until Redis shows a mastership after term from,
// and tells whether it is the one Transfer asked for.
func (m *MasterElection) awaitSuccessor(ctx context.Context, to string, from int64) error {
	poll := time.Millisecond
	for {
		st, err := scripts.Check(ctx, m.client, m.keys)
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("masterelection: transfer: waiting for the successor: %w", ctx.Err())
		case err != nil:
			// Redis unreachable for now: the hand-over itself is done.
		case st.Exists && st.Term > from:
			m.noteTerm(st.Term)
			if (to != "" && st.NodeID != to) || st.NodeID == m.cfg.NodeID {
				return fmt.Errorf("masterelection: transfer: %w: %q is master with term %d", ErrTransferNotTaken, st.NodeID, st.Term)
			}
			return nil
		}
		t := m.clock.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("masterelection: transfer: waiting for the successor: %w", ctx.Err())
		case <-t.C():
		}
		poll = min(2*poll, max(m.cfg.CheckInterval/8, time.Millisecond))
	}
}

// remoteTransfer turns a message of the control channel into a transfer
// request, or reports why it is ignored. It is honoured only by the master,
// only when it names the master's term or none, and only for a node with a
// live registry entry other than this one: a request that names no such
// process changes nothing.
func (m *MasterElection) remoteTransfer(ctx context.Context, payload string) (transferRequest, bool) {
	var c scripts.ControlRequest
	if err := json.Unmarshal([]byte(payload), &c); err != nil || c.Request != scripts.ControlTransfer {
		m.log.Debug().Str("payload", fmt.Sprintf("%.96q", payload)).Msg("control channel: not a transfer request, ignored")
		return transferRequest{}, false
	}
	if c.To == m.cfg.NodeID {
		return transferRequest{}, false
	}
	if c.Term != 0 && c.Term != m.Term() {
		// For another master: an earlier one's, sent again after this
		// process took over, or a later one's.
		m.log.Debug().Int64("term", c.Term).Msg("control channel: a transfer request for another term, ignored")
		return transferRequest{}, false
	}
	if c.To != "" {
		reg := m.Registry()
		if reg == nil || scripts.ValidateName("node id", c.To) != nil {
			return transferRequest{}, false
		}
		rctx, cancel := context.WithTimeout(ctx, m.opTimeout())
		_, err := reg.Process(rctx, c.To)
		cancel()
		if err != nil {
			m.emitError(fmt.Errorf("control channel: transfer to %q ignored: no live process of that id (%v)", c.To, err))
			return transferRequest{}, false
		}
	}
	m.log.Info().Str("to", c.To).Msg("control channel: transfer requested")
	return transferRequest{to: c.To}, true
}
