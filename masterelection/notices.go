package masterelection

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
)

// notice is a lock notice of the events channel (scripts.Notice), with
// the payload it was read from, for reports.
type notice struct {
	scripts.Notice
	raw []byte
}

// healthCheckInterval is how often go-redis pings an idle subscription to
// find a dead connection. Polling covers lost notices, so a long interval
// only delays the push; it saves most of a slave's round trips at rest.
const healthCheckInterval = 30 * time.Second

func parseNotice(payload string) (notice, error) {
	n, err := scripts.ParseNotice([]byte(payload))
	if err != nil {
		return notice{}, fmt.Errorf("%w: on the events channel: %w", ErrGarbage, err)
	}
	return notice{Notice: n, raw: []byte(payload)}, nil
}

// listen subscribes to the events channel and forwards its notices to
// m.notices until the subscription is closed; on the same connection it
// listens to the control channel, unless Config.IgnoreRemoteTransfers, and
// forwards the transfer requests the master honours to m.transfers. A notice is dropped when the
// loop is far behind: polling covers what notices only speed up. The
// subscription is made before listen returns, so no notice published after
// that is missed; go-redis reconnects and resubscribes by itself.
func (m *MasterElection) listen(ctx context.Context, wg *sync.WaitGroup) (closeFn func()) {
	channels := []string{m.keys.Events}
	if !m.cfg.IgnoreRemoteTransfers {
		channels = append(channels, m.keys.Control)
	}
	ps := m.client.Subscribe(ctx, channels...)
	// Wait for the server's confirmation, so that the subscription is in
	// place before the first election resolves: a release announced after
	// Start returned is then never missed. On failure go-redis subscribes
	// again by itself; polling covers the gap.
	rctx, cancel := context.WithTimeout(ctx, m.opTimeout())
	if _, err := ps.ReceiveTimeout(rctx, m.opTimeout()); err != nil && ctx.Err() == nil {
		m.emitError(fmt.Errorf("subscribe to %s: %w", m.keys.Events, err))
	}
	cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for msg := range ps.Channel(redis.WithChannelHealthCheckInterval(healthCheckInterval)) {
			if msg.Channel == m.keys.Control {
				if m.Term() == 0 {
					continue // only the master hands over
				}
				if req, ok := m.remoteTransfer(ctx, msg.Payload); ok {
					select {
					case m.transfers <- req:
					default: // a transfer is pending already
					}
				}
				continue
			}
			n, err := parseNotice(msg.Payload)
			if err != nil {
				m.emitError(err)
				continue
			}
			if !n.Lock() {
				continue // not a lock notice: another version's, or someone else's
			}
			select {
			case m.notices <- n:
			case <-ctx.Done():
				return
			default:
				m.log.Debug().Str("event", n.Event).Msg("election loop busy: notice dropped, polling will catch up")
			}
		}
	}()
	return func() { _ = ps.Close() }
}
