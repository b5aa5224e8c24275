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

// subscribe subscribes to the events channel and, unless
// Config.IgnoreRemoteTransfers, the control channel, on a connection of its
// own, on a goroutine of its own so that Start's other round trips need not
// wait for the dial. It waits for the server's confirmation (at most an
// operation timeout), so that the subscription is in place before Start
// returns: a release announced after that is never missed. When that fails
// (Redis was not answering yet, most likely), it tries once more when
// opened closes (the registry is open: Redis answers), and a second failure
// is an error event; go-redis keeps subscribing again by itself once listen
// reads the subscription, and polling covers the gap. ctx ends the
// attempts.
func (m *MasterElection) subscribe(ctx context.Context, opened <-chan struct{}) *subscription {
	channels := []string{m.keys.Events}
	if !m.cfg.IgnoreRemoteTransfers {
		channels = append(channels, m.keys.Control)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &subscription{
		ps:        m.client.Subscribe(sctx), // no channel yet: no round trip
		ready:     make(chan struct{}),
		confirmed: make(chan struct{}),
		cancel:    cancel,
	}
	go func() {
		defer close(s.ready)
		confirm := func() error {
			rctx, cancel := context.WithTimeout(sctx, m.opTimeout())
			defer cancel()
			_, err := s.ps.ReceiveTimeout(rctx, m.opTimeout())
			return err
		}
		// Subscribe records the channels even when it fails, so the
		// second attempt's read subscribes again on a new connection.
		err := s.ps.Subscribe(sctx, channels...)
		if err == nil {
			err = confirm()
		}
		if err != nil {
			select {
			case <-opened:
			case <-sctx.Done():
				return
			}
			if err = confirm(); err != nil {
				if sctx.Err() == nil {
					m.emitError(fmt.Errorf("subscribe to %s: %w", m.keys.Events, err))
				}
				return
			}
		}
		close(s.confirmed)
	}()
	return s
}

// listen forwards the notices of subscription s to m.notices until s is
// closed, and the transfer requests of the control channel that the master
// honours to m.transfers. A notice is dropped when the loop is far behind:
// polling covers what notices only speed up. go-redis reconnects and
// resubscribes by itself.
func (m *MasterElection) listen(ctx context.Context, wg *sync.WaitGroup, s *subscription) (closeFn func()) {
	ps := s.ps
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-s.ready:
		case <-ctx.Done():
			return
		}
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
	return s.close
}
