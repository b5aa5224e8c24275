package masterelection

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notice is a message on the election's events channel: the lock scripts
// publish {"event":"acquired"|"released","nodeId":…,"term":…}.
type notice struct {
	Event  string `json:"event"`
	NodeID string `json:"nodeId"`
	Term   int64  `json:"term"`
	raw    []byte
}

// healthCheckInterval is how often go-redis pings an idle subscription to
// find a dead connection. Polling covers lost notices, so a long interval
// only delays the push; it saves most of a slave's round trips at rest.
const healthCheckInterval = 30 * time.Second

const (
	noticeAcquired = "acquired"
	noticeReleased = "released"
)

func parseNotice(payload string) (notice, error) {
	var n notice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return notice{}, fmt.Errorf("%w: notice %.64q on the events channel is not JSON: %v", ErrGarbage, payload, err)
	}
	if n.Event == "" {
		return notice{}, fmt.Errorf("%w: notice %.64q on the events channel has no event", ErrGarbage, payload)
	}
	n.raw = []byte(payload)
	return n, nil
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
			if n.Event != noticeAcquired && n.Event != noticeReleased {
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
