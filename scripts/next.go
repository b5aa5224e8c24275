package scripts

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Succession is the order in which slaves contend when the lock of Term
// is released or expires, as the master of Term published it under
// Keys.Next: Order[0] contends at once, the others only later, each after
// a longer delay, and only when no one has taken the lock by then. It is
// a hint for speed and quiet, never for safety: the acquire script decides
// who gets the lock, and a missing, stale or forged succession only brings
// back the contention of every slave.
type Succession struct {
	Term  int64    `json:"term"`
	Order []string `json:"order"`
}

// Rank returns the place of nodeID in the order, or -1.
func (s Succession) Rank(nodeID string) int { return slices.Index(s.Order, nodeID) }

// parseSuccession reads the content of Keys.Next; ok is false when it is
// empty or not a succession (garbage is ignored: it only costs speed).
func parseSuccession(raw string) (s Succession, ok bool) {
	if raw == "" || json.Unmarshal([]byte(raw), &s) != nil || s.Term <= 0 {
		return Succession{}, false
	}
	return s, true
}

// WriteSuccession stores s under k.Next, replacing what was there.
func WriteSuccession(ctx context.Context, c redis.Cmdable, k Keys, s Succession) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode succession: %w", err)
	}
	if err := c.Set(ctx, k.Next, b, 0).Err(); err != nil {
		return fmt.Errorf("write succession %s: %w", k.Next, err)
	}
	return nil
}
