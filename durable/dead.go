package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// DeadLetter is an entry a Consumer gave up on after Config.MaxDeliveries
// deliveries, kept in the dead-letter stream (keyspace.Keys.Dead) until an
// operator retries or drops it.
type DeadLetter struct {
	// ID is the dead letter's id in the dead-letter stream; Retry and Drop
	// take it.
	ID string
	// Message is the envelope as the master sent it (its ID is the message
	// id the handlers saw). When the entry's envelope could not be decoded,
	// only Raw is set.
	Message pubsub.Message
	// Raw is the envelope as stored.
	Raw string
	// Term is the term the entry was written under in its last inbox.
	Term int64
	// Inbox is the process whose inbox the entry was in.
	Inbox string
	// Process is the process that gave up on it.
	Process string
	// Deliveries is the number of times it was delivered, all inboxes
	// counted.
	Deliveries int64
	// Error is the last delivery's error, as text.
	Error string
	// At is when it became a dead letter (the stream id's time).
	At time.Time
}

// DeadLetters reads and acts on the dead-letter stream of one election:
// the operator's side of Config.MaxDeliveries (herd dead list, retry,
// drop). It keeps no state; it is safe for concurrent use.
type DeadLetters struct {
	client redis.UniversalClient
	keys   keyspace.Keys
}

// NewDeadLetters returns the DeadLetters of cfg's lock name (Config.LockName
// and Config.Cluster; the other fields are not used).
func NewDeadLetters(client redis.UniversalClient, cfg Config) (*DeadLetters, error) {
	if nilclient.Is(client) {
		return nil, errors.New("durable: NewDeadLetters: client is nil")
	}
	cfg, err := cfg.withDefaults(client, nil)
	if err != nil {
		return nil, err
	}
	return &DeadLetters{client: client, keys: cfg.keys()}, nil
}

// Stream returns the name of the dead-letter stream.
func (d *DeadLetters) Stream() string { return d.keys.Dead }

// Count returns the number of dead letters.
func (d *DeadLetters) Count(ctx context.Context) (int64, error) {
	n, err := d.client.XLen(ctx, d.keys.Dead).Result()
	if err != nil {
		return 0, fmt.Errorf("durable: count the dead letters (%q): %w", d.keys.Dead, err)
	}
	return n, nil
}

// List returns up to count dead letters, oldest first, starting after the
// dead letter after ("" from the first); count <= 0 means all.
func (d *DeadLetters) List(ctx context.Context, after string, count int64) ([]DeadLetter, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	var (
		es  []redis.XMessage
		err error
	)
	if count > 0 {
		es, err = d.client.XRangeN(ctx, d.keys.Dead, start, "+", count).Result()
	} else {
		es, err = d.client.XRange(ctx, d.keys.Dead, start, "+").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("durable: list the dead letters (%q): %w", d.keys.Dead, err)
	}
	out := make([]DeadLetter, len(es))
	for i, e := range es {
		out[i] = d.decode(e)
	}
	return out, nil
}

// decode turns a stream entry of the dead-letter stream into a DeadLetter;
// fields it cannot read stay zero.
func (d *DeadLetters) decode(e redis.XMessage) DeadLetter {
	str := func(f string) string { s, _ := e.Values[f].(string); return s }
	dl := DeadLetter{ID: e.ID, Raw: str(rdb.InboxFieldMessage), Process: str(rdb.DeadFieldProcess), Error: str(rdb.DeadFieldError)}
	if m, err := pubsub.ParseMessage([]byte(dl.Raw)); err == nil {
		dl.Message = m
	}
	dl.Term, _ = strconv.ParseInt(str(rdb.InboxFieldTerm), 10, 64)
	dl.Deliveries, _ = strconv.ParseInt(str(rdb.DeadFieldDeliveries), 10, 64)
	dl.Inbox = strings.TrimPrefix(str(rdb.DeadFieldInbox), d.keys.Inbox(""))
	if ms, _, ok := strings.Cut(e.ID, "-"); ok {
		if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
			dl.At = time.UnixMilli(v)
		}
	}
	return dl
}

// Retry sends the dead letter id again: it is added to the inbox of to
// ("" for the inbox it was in) under the current term, its deliveries
// counted from zero, and deleted from the dead-letter stream, in one atomic
// step. It returns the new entry id. It fails, changing nothing, when the
// dead letter does not exist (ErrNoDeadLetter), when to is not a
// live process (ErrNotRegistered), or when no term was ever minted.
func (d *DeadLetters) Retry(ctx context.Context, id, to string) (string, error) {
	if to == "" {
		var err error
		if to, err = d.inboxOf(ctx, id); err != nil {
			return "", fmt.Errorf("durable: retry dead letter %s: %w", id, err)
		}
	}
	if err := route.CheckName("process id", to); err != nil {
		return "", fmt.Errorf("durable: retry dead letter %s: %w", id, err)
	}
	entry, err := rdb.DeadRetry(ctx, d.client, d.keys, id, to)
	if errors.Is(err, rdb.ErrNotLive) {
		return "", fmt.Errorf("durable: retry dead letter %s to %q: %w", id, to, ErrNotRegistered)
	}
	if err != nil {
		return "", fmt.Errorf("durable: %w", err)
	}
	return entry, nil
}

// inboxOf returns the process whose inbox the dead letter id was in;
// rdb.ErrNoDeadLetter when there is no such dead letter.
func (d *DeadLetters) inboxOf(ctx context.Context, id string) (string, error) {
	es, err := d.client.XRange(ctx, d.keys.Dead, id, id).Result()
	if err != nil {
		return "", err
	}
	if len(es) == 0 {
		return "", rdb.ErrNoDeadLetter
	}
	return d.decode(es[0]).Inbox, nil
}

// Drop deletes the dead letters ids for good and returns how many there
// were.
func (d *DeadLetters) Drop(ctx context.Context, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := d.client.XDel(ctx, d.keys.Dead, ids...).Result()
	if err != nil {
		return 0, fmt.Errorf("durable: drop dead letters: %w", err)
	}
	return n, nil
}
