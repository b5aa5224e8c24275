package operate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// DefaultStepDownTimeout is the default bound of StepDown's wait.
const DefaultStepDownTimeout = 10 * time.Second

// stepDownResend is how long StepDown waits before it publishes its
// request again; the wait doubles up to a second.
const stepDownResend = 100 * time.Millisecond

// StepDownResult tells who was master before and after a step-down.
type StepDownResult struct {
	From     string        `json:"from"`
	FromTerm int64         `json:"fromTerm"`
	To       string        `json:"to"`
	Term     int64         `json:"term"`
	Took     time.Duration `json:"-"`
	// TookMs is Took in milliseconds, for JSON.
	TookMs int64 `json:"tookMs"`
}

// StepDown asks the master to hand over, to the process to when it is not
// "", by publishing a transfer request for the master's term on the lock's
// control channel, and waits until Redis shows a new master (a larger
// term), for at most timeout. It publishes the request again while it
// waits (after 100 ms, then at doubling intervals up to 1 s): pub/sub keeps
// nothing for a master whose subscription is reconnecting, and the term in
// the request keeps a later master from honouring a copy. The master honours the request unless it runs with
// IgnoreRemoteTransfers; it hands over only to a process with a live
// registry entry.
//
// Errors wrap ErrUsage (to is no valid node id, or is the master),
// ErrNotDelivered (no master; to has no live entry; nobody listens on the
// control channel, which only a server that is not a Cluster node can
// tell), ErrStepDownTimeout, or ErrOtherMaster (the new master is
// another process than to, or the same as before; the result names it).
func StepDown(ctx context.Context, r *Reader, to string, timeout time.Duration) (StepDownResult, error) {
	c, k := r.conn.Client, r.conn.Keys
	if timeout <= 0 {
		timeout = DefaultStepDownTimeout
	}
	if to != "" {
		if err := keyspace.ValidateName("-to", to); err != nil {
			return StepDownResult{}, fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}
	st, err := rdb.Check(ctx, c, k)
	if err != nil {
		return StepDownResult{}, Classify("check the lock "+k.Master, err)
	}
	if !st.Exists || st.NodeID == "" {
		if st.TermMissing {
			return StepDownResult{}, UnknownLock(ctx, r.conn)
		}
		return StepDownResult{}, fmt.Errorf("%w: no master: nobody holds the lock %s", ErrNotDelivered, k.Master)
	}
	res := StepDownResult{From: st.NodeID, FromTerm: st.Term}
	if to != "" {
		if to == st.NodeID {
			return res, fmt.Errorf("%w: -to %s names the master itself", ErrUsage, to)
		}
		_, err := r.reg.Process(ctx, to)
		switch {
		case errors.Is(err, registry.ErrNotFound):
			return res, fmt.Errorf("%w: -to %s: no live process of that id is registered under %q (the master would ignore the request)", ErrNotDelivered, to, r.conn.Lock)
		case err != nil:
			return res, Classify("read the registry entry of "+to, err)
		}
	}
	payload, err := json.Marshal(keyspace.ControlRequest{Request: keyspace.ControlTransfer, To: to, Term: st.Term})
	if err != nil {
		return res, err
	}
	start := time.Now()
	n, err := c.Publish(ctx, k.Control, payload).Result()
	// On a Cluster, PUBLISH counts only the subscribers of the node that
	// took it (it reaches the others' too): 0 proves nothing there.
	// Elsewhere 0 means nobody listens yet: a master that has just started
	// subscribes after its Start returned, and one re-dialling its
	// subscription listens again soon; ask again for a moment.
	for wait := 10 * time.Millisecond; err == nil && n == 0 && r.conn.Topology != TopologyCluster && wait <= 80*time.Millisecond; wait *= 2 {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
		n, err = c.Publish(ctx, k.Control, payload).Result()
	}
	if err != nil {
		return res, Classify("publish the request on "+k.Control, err)
	}
	if n == 0 && r.conn.Topology != TopologyCluster {
		return res, fmt.Errorf("%w: nobody listens on %s: the master %s runs with IgnoreRemoteTransfers (every process does), or it is gone",
			ErrNotDelivered, k.Control, st.NodeID)
	}

	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	poll := 2 * time.Millisecond
	resend, resendEvery := start.Add(stepDownResend), stepDownResend
	for {
		now, err := rdb.Check(wctx, c, k)
		switch {
		case err == nil && now.Exists && now.Term > st.Term:
			res.To, res.Term = now.NodeID, now.Term
			res.Took = time.Since(start)
			res.TookMs = res.Took.Milliseconds()
			switch {
			case to != "" && now.NodeID != to:
				again := ""
				if now.NodeID == st.NodeID {
					again = ", again"
				}
				return res, fmt.Errorf("%w: %s is master%s under term %d, not %s: %s did not take the lock within the transfer window (it is not a candidate, or could not reach Redis)",
					ErrOtherMaster, now.NodeID, again, now.Term, to, to)
			case now.NodeID == st.NodeID:
				return res, fmt.Errorf("%w: %s took the lock back under term %d: no other candidate took it within the transfer window", ErrOtherMaster, now.NodeID, now.Term)
			}
			return res, nil
		case err != nil && wctx.Err() == nil && ctx.Err() == nil:
			// Redis unreachable for now: the request is out; keep asking.
		case err == nil && time.Now().After(resend):
			// Not honoured yet: the master may have been re-dialling its
			// subscription when the request went out. A copy the master
			// already heard is dropped while its hand-over is pending.
			if m, err := c.Publish(wctx, k.Control, payload).Result(); err == nil {
				n = max(n, m)
			}
			resendEvery = min(2*resendEvery, time.Second)
			resend = time.Now().Add(resendEvery)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, fmt.Errorf("%w: the request was published on %s (%d listener(s) on the node that took it), but no new master within %s: the master runs with IgnoreRemoteTransfers, or cannot reach Redis",
				ErrStepDownTimeout, k.Control, n, timeout)
		case <-time.After(poll):
		}
		poll = min(2*poll, 50*time.Millisecond)
	}
}
