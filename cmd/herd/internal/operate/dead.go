package operate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// DeadLetter is one dead letter of durable routing, as herd dead list shows
// it: an entry a durable.Consumer gave up on after Config.MaxDeliveries
// deliveries.
type DeadLetter struct {
	durable.DeadLetter
	// Age is the server's clock at the read minus At; -1 when At is
	// unknown.
	Age time.Duration
}

// MarshalJSON writes the dead letter with exactly these members: id, at
// (RFC 3339, ms), ageMs, inbox, process, deliveries, error, term, message
// (the envelope as the master sent it; null when it cannot be decoded) and,
// only when message is null, raw (the envelope as stored).
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	out := struct {
		ID         string           `json:"id"`
		At         string           `json:"at"`
		AgeMs      int64            `json:"ageMs"`
		Inbox      string           `json:"inbox"`
		Process    string           `json:"process"`
		Deliveries int64            `json:"deliveries"`
		Error      string           `json:"error"`
		Term       int64            `json:"term"`
		Message    *json.RawMessage `json:"message"`
		Raw        string           `json:"raw,omitempty"`
	}{ID: d.ID, AgeMs: ms(d.Age), Inbox: d.Inbox, Process: d.Process, Deliveries: d.Deliveries, Error: d.Error, Term: d.Term}
	if !d.At.IsZero() {
		out.At = d.At.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	if d.Message.ID != "" {
		m, err := d.Message.MarshalJSON()
		if err != nil {
			return nil, err
		}
		raw := json.RawMessage(m)
		out.Message = &raw
	} else {
		out.Raw = d.Raw
	}
	return json.Marshal(out)
}

// DeadList is what herd dead list shows: the oldest dead letters of a lock
// name and how many there are in all.
type DeadList struct {
	// Stream is the dead-letter stream (keyspace.Keys.Dead).
	Stream string
	// Total is the number of dead letters in the stream.
	Total int64
	// Letters are the dead letters listed, oldest first.
	Letters []DeadLetter
	// Time is the server's clock at the read.
	Time time.Time
}

// RetryResult is the outcome of one retried dead letter.
type RetryResult struct {
	// ID is the dead letter's id.
	ID string `json:"id"`
	// To is the process whose inbox it was added to.
	To string `json:"to"`
	// Entry is its new entry id in that inbox.
	Entry string `json:"entry"`
}

// deadIDRE is the form of a stream entry id, the only form herd dead takes.
var deadIDRE = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

// CheckDeadID returns an error wrapping ErrUsage when id is not of the form
// of a stream entry id ("<ms>-<seq>"), as herd dead list prints them.
func CheckDeadID(id string) error {
	if !deadIDRE.MatchString(id) {
		return fmt.Errorf("%w: %q is not a dead letter id: want <ms>-<seq> as herd dead list prints it, such as 1767225600123-0", ErrUsage, id)
	}
	return nil
}

// deadLetters returns the durable.DeadLetters of r's lock.
func deadLetters(r *Reader) (*durable.DeadLetters, error) {
	d, err := durable.NewDeadLetters(r.conn.Client, durable.Config{LockName: r.conn.Lock, Cluster: r.conn.Keys.Cluster()})
	if err != nil {
		return nil, fmt.Errorf("%w: -lock %s: %w", ErrUsage, r.conn.Lock, err)
	}
	return d, nil
}

// ListDead returns the n oldest dead letters of r's lock (all of them when
// n <= 0) and how many there are.
func ListDead(ctx context.Context, r *Reader, n int64) (DeadList, error) {
	d, err := deadLetters(r)
	if err != nil {
		return DeadList{}, err
	}
	out := DeadList{Stream: d.Stream()}
	if out.Time, err = r.conn.Client.Time(ctx).Result(); err != nil {
		return DeadList{}, Classify("read the server's clock (TIME)", err)
	}
	if out.Total, err = d.Count(ctx); err != nil {
		return DeadList{}, Classify("count the dead letters of "+d.Stream(), err)
	}
	letters, err := d.List(ctx, "", n)
	if err != nil {
		return DeadList{}, Classify("list the dead letters of "+d.Stream(), err)
	}
	out.Letters = make([]DeadLetter, len(letters))
	for i, l := range letters {
		out.Letters[i] = DeadLetter{DeadLetter: l, Age: -1}
		if !l.At.IsZero() {
			out.Letters[i].Age = max(out.Time.Sub(l.At), 0)
		}
	}
	return out, nil
}

// RetryDead sends the dead letter id again (durable.DeadLetters.Retry): to
// the inbox of the process to, or, when to is "", to the inbox it was in.
// The error names the dead letter and the process: the dead letter does not
// exist (rdb.ErrNoDeadLetter), or the process is not live in the
// registry (durable.ErrNotRegistered); a bad id or process id wraps
// ErrUsage.
func RetryDead(ctx context.Context, r *Reader, id, to string) (RetryResult, error) {
	res := RetryResult{ID: id, To: to}
	if err := CheckDeadID(id); err != nil {
		return res, err
	}
	if to != "" {
		if err := keyspace.ValidateName("-to", to); err != nil {
			return res, fmt.Errorf("%w: %w", ErrUsage, err)
		}
	}
	d, err := deadLetters(r)
	if err != nil {
		return res, err
	}
	if to == "" {
		// The inbox it was in, to name that process in the outcome.
		es, err := r.conn.Client.XRange(ctx, d.Stream(), id, id).Result()
		if err != nil {
			return res, Classify("read dead letter "+id+" of "+d.Stream(), err)
		}
		if len(es) == 0 {
			return res, fmt.Errorf("dead letter %s: %w in %s (herd dead list shows the ids)", id, rdb.ErrNoDeadLetter, d.Stream())
		}
		inbox, _ := es[0].Values[rdb.DeadFieldInbox].(string)
		res.To = strings.TrimPrefix(inbox, r.conn.Keys.Inbox(""))
		if res.To == "" || res.To == inbox {
			return res, fmt.Errorf("dead letter %s does not say which inbox it was in (field %q is %q): retry it with -to PROCESS", id, rdb.DeadFieldInbox, inbox)
		}
	}
	res.Entry, err = d.Retry(ctx, id, res.To)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, rdb.ErrNoDeadLetter):
		return res, fmt.Errorf("dead letter %s: %w in %s (herd dead list shows the ids)", id, rdb.ErrNoDeadLetter, d.Stream())
	case errors.Is(err, durable.ErrNotRegistered):
		hint := "retry it to a live process with -to PROCESS"
		if to != "" {
			hint = "choose a live one"
		}
		return res, fmt.Errorf("dead letter %s not retried: %q is not a live process in the registry of %q (herd processes lists them): %s",
			id, res.To, r.conn.Lock, hint)
	}
	return res, Classify("retry dead letter "+id+" to "+res.To, err)
}

// CheckRetryTarget returns an error naming to when no live process of that
// id is registered under r's lock, so that herd dead retry -to fails before
// it retries anything (RetryDead checks again, atomically, for each).
func CheckRetryTarget(ctx context.Context, r *Reader, to string) error {
	if err := keyspace.ValidateName("-to", to); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	_, err := r.reg.Process(ctx, to)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return fmt.Errorf("-to %s: no live process of that id is registered under %q (herd processes lists them); nothing retried", to, r.conn.Lock)
	case err != nil:
		return Classify("read the registry entry of "+to, err)
	}
	return nil
}

// DropDead deletes the dead letters ids for good, one XDEL each in one
// pipeline, and returns how many of them existed and, in the order given,
// the ids that did not (an id given twice counts once).
func DropDead(ctx context.Context, r *Reader, ids []string) (int64, []string, error) {
	for _, id := range ids {
		if err := CheckDeadID(id); err != nil {
			return 0, nil, err
		}
	}
	d, err := deadLetters(r)
	if err != nil {
		return 0, nil, err
	}
	seen := map[string]bool{}
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
	cmds, err := r.conn.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.XDel(ctx, d.Stream(), id)
		}
		return nil
	})
	if err != nil {
		return 0, nil, Classify("drop dead letters of "+d.Stream(), err)
	}
	var n int64
	var missing []string
	for i, cmd := range cmds {
		if cmd.(*redis.IntCmd).Val() == 0 {
			missing = append(missing, ids[i])
		} else {
			n++
		}
	}
	return n, missing, nil
}

// DropAllDead deletes every dead letter of r's lock, in one atomic step
// (XLEN and DEL of the stream in a MULTI), and returns how many there were.
// A later dead letter creates the stream again.
func DropAllDead(ctx context.Context, r *Reader) (int64, error) {
	d, err := deadLetters(r)
	if err != nil {
		return 0, err
	}
	var n *redis.IntCmd
	_, err = r.conn.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		n = p.XLen(ctx, d.Stream())
		p.Del(ctx, d.Stream())
		return nil
	})
	if err != nil {
		return 0, Classify("drop the dead letters of "+d.Stream(), err)
	}
	return n.Val(), nil
}
