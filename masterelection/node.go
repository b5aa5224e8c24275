package masterelection

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/atomicmax"
	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// node is what every part of one election shares: who this process is,
// where its election lives, the clock and the event bus. The election core
// (core.go), membership (membership.go) and the facade (election.go) each
// hold it; nothing in it belongs to one of them.
type node struct {
	client      redis.UniversalClient
	cfg         Config
	keys        keyspace.Keys
	clock       clock.Clock
	base        time.Time // origin of the monotonic deadlines kept in mastership
	log         zerolog.Logger
	bus         *bus
	incarnation string // names this run of the process in its registry entry (Incarnation)

	observedTerm atomic.Int64 // highest term seen on this lock name
	candidate    atomic.Bool
	// awaitingID: Start found this node id's registry entry written lately
	// by another incarnation, so the process does not contend before its
	// first registration makes the id its own (twins.go).
	awaitingID atomic.Bool

	// claims fires at every acquired notice the feed reads: Transfer waits
	// on it for its successor (awaitSuccessor).
	claims broadcast

	mu       sync.Mutex
	metadata map[string]any
	reg      *registry.Registry // set by Start before the loops run; nil in standalone mode
	lastErr  error              // the latest error event, for Start's error
}

// broadcast wakes every goroutine waiting on it at its next fire. The zero
// value is ready; it is safe for concurrent use.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// fire wakes every waiter.
func (b *broadcast) fire() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// metadataCopy returns a copy of this process's metadata.
func (n *node) metadataCopy() map[string]any {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.metadata)
}

// setMetadata keeps a copy of md as this process's metadata.
func (n *node) setMetadata(md map[string]any) {
	n.mu.Lock()
	n.metadata = maps.Clone(md)
	n.mu.Unlock()
}

// registry returns the process registry Start opened; nil before that and
// in standalone mode.
func (n *node) registry() *registry.Registry {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reg
}

// setRegistry records the registry Start opened.
func (n *node) setRegistry(reg *registry.Registry) {
	n.mu.Lock()
	n.reg = reg
	n.mu.Unlock()
}

// processInfo is this process's registry entry as of now.
func (n *node) processInfo(role registry.Role) registry.ProcessInfo {
	now := n.clock.Now()
	return registry.ProcessInfo{
		ProcessID:    n.cfg.NodeID,
		NodeID:       n.cfg.NodeID,
		Role:         role,
		LastSeen:     now,
		Capabilities: n.cfg.Capabilities,
		Identifier:   n.cfg.Identifier,
		RegisteredAt: n.base,
		Metadata:     n.metadataCopy(),
		NonCandidate: !n.candidate.Load(),
		Incarnation:  n.incarnation,
		Priority:     n.cfg.Priority,
	}
}

// masterInfoJSON is the master_process value given to the acquire script.
func (n *node) masterInfoJSON() ([]byte, error) {
	b, err := json.Marshal(n.processInfo(registry.RoleMaster))
	if err != nil {
		return nil, fmt.Errorf("encode master process info: %w", err)
	}
	return b, nil
}

// opTimeout bounds one Redis call of the loops.
func (n *node) opTimeout() time.Duration { return n.cfg.HeartbeatInterval }

// startTimeout bounds one Redis call of Start and of the calls that follow
// it until the first election resolved: the first pipeline, the notice
// feed's subscription, the registry's opening, the first check or acquire
// and the first registration. A start is not a heartbeat: a fleet starting at once
// queues at Redis (and at its listen backlog) for longer than a
// HeartbeatInterval, and a call cut off there is only sent again.
func (n *node) startTimeout() time.Duration { return n.cfg.LockTTL }

func (n *node) noteTerm(t int64) { atomicmax.Raise(&n.observedTerm, t) }

// cleanupContext returns ctx when it is still live, or a fresh context
// bounded by the operation timeout when ctx has already ended, so cleanup
// that matters to others (the release) still gets its chance.
func (n *node) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithTimeout(ctx, n.opTimeout())
	}
	return context.WithTimeout(context.WithoutCancel(ctx), min(n.opTimeout(), time.Second))
}

// lastError returns the latest error reported by an error event, or nil.
func (n *node) lastError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lastErr
}

// deadlineAfter is the self-fencing deadline of a lock (re)written by a call
// sent at sent, as an offset from n.base.
func (n *node) deadlineAfter(sent time.Time) time.Duration {
	return sent.Sub(n.base) + n.cfg.LockTTL - n.cfg.StepDownMargin
}

func (n *node) emitError(err error) {
	n.log.Warn().Err(err).Msg("election error")
	n.mu.Lock()
	n.lastErr = err
	n.mu.Unlock()
	n.bus.emit(topicError, payload{err: err})
}

func (n *node) handlerPanicked(topic string, v any, stack []byte) {
	n.log.Error().Str("event", topic).Interface("panic", v).Bytes("stack", stack).Msg("event handler panicked")
	if topic != topicError {
		n.bus.emit(topicError, payload{err: fmt.Errorf("%w: %s handler: %v", ErrHandlerPanic, topic, v)})
	}
}

// contends reports whether the loop may contend for the lock now: the
// process is a candidate and does not wait for its node id (awaitingID).
func (n *node) contends() bool { return n.candidate.Load() && !n.awaitingID.Load() }

// quiet is how long a live process may go without writing its registry
// entry: SlaveTimeout, after which the master counts it gone too.
func (n *node) quiet() time.Duration { return n.cfg.SlaveTimeout }

// newIncarnation returns a random name for one run of a process.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return hex.EncodeToString(b[:])
}
