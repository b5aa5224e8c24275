package pubsub

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/keyspace"
)

// DefaultLockName is the lock name of the specification; the events channel
// and the master inbox derive from it ("master-election:events",
// "master-election:master-inbox").
const DefaultLockName = keyspace.DefaultLockName

// KeySource gives the Redis names of an election. When the Mastership of
// NewRouter or NewReports, or Config.Terms of NewSubscriber, implements it
// (*masterelection.MasterElection does), the lock name, the Cluster hash tag
// and the slave prefix are taken from it: Config.LockName, Cluster and
// SlavePrefix may then be left empty (if set, they must agree with it).
type KeySource interface {
	Keys() keyspace.Keys
}

// Config configures a Router, Subscriber or Reports. The zero value of every
// field means its default; DefaultConfig returns them filled in. The
// constructors copy the Config, so changing it afterwards has no effect.
type Config struct {
	// LockName is the election's lock name, from which the events channel
	// and the master inbox channel are derived (keyspace.NewKeys). It must be
	// the one the election uses. Default: DefaultLockName.
	LockName string
	// Cluster wraps the lock name in a Redis Cluster hash tag ({LockName}),
	// as an election tags its keys when its client is a *redis.ClusterClient
	// (masterelection.Config has no such field). It is taken from the
	// KeySource when there is one, and set with a *redis.ClusterClient; set
	// it only for another client of a Cluster election's. Default: false.
	Cluster bool
	// SlavePrefix is the prefix of the per-process channels; a process with
	// id X listens on SlavePrefix+X. Default: keyspace.DefaultSlavePrefix
	// ("worker:slave:").
	SlavePrefix string
	// OnError receives the errors of a Subscriber's or Reports' loop: stale
	// messages (*StaleTermError), messages and notices whose term Redis did
	// not confirm (*UnverifiedTermError), undeliverable ones
	// (*MessageError), messages dropped for a full backlog (ErrBacklogFull)
	// and connection problems (ErrConnection). It is called
	// on the loop goroutine, one call at a time, in the order the problems
	// occur; it must not block, since the loop waits for it, and must not
	// call Close.
	// Default: nil, errors are dropped (Rejected and Unverified still count
	// refused messages).
	OnError func(error)
	// PingInterval is how long the connection may stay silent before it is
	// sent PING; when the next interval passes without any reply either, the
	// connection is replaced. Detects silently dead connections within
	// 2 × PingInterval. Every Subscriber and Reports of a client, and the
	// client's elections, share one connection, which uses the smallest
	// interval any of them asked for. Default: 15s.
	PingInterval time.Duration
	// MaxRetryDelay caps the wait between attempts to reconnect after a
	// receive error; the wait starts at 10ms and doubles. The shared
	// connection uses the smallest of its users': 100ms when the client also
	// runs an election, whose notice feed asks for that. Default: 1s.
	MaxRetryDelay time.Duration
	// MaxBacklog bounds, in bytes (channel name and payload), the messages
	// a Subscriber or Reports has received but its handlers not yet taken;
	// each message that does not fit is dropped and reported
	// (ErrBacklogFull). Every Subscriber and Reports of a client shares one
	// connection, so a slow handler delays only its own receiver. Default:
	// 32 MiB, Redis's own default limit for a pub/sub client's output
	// buffer, past which Redis would drop the connection.
	MaxBacklog int
	// OpTimeout bounds each read of the term key by a Subscriber: at Start,
	// after each resubscription, and to verify a term above every term it
	// has verified (see Subscriber). The loop handles nothing else while a
	// read runs, so this is also the longest a verification holds up the
	// messages behind it. A message whose verification times out is
	// refused (ErrUnverifiedTerm). Used by Subscriber only. Default: 1s.
	OpTimeout time.Duration
	// clock stamps sentAt: the real clock, or a fake one set by the
	// package's tests (export_test.go).
	clock clock.Clock
	// Terms, when set, is read by a Subscriber before it judges each routed
	// message, and its term raised into the fence: pass the election
	// (*masterelection.MasterElection implements it) so that the terms its
	// lock checks see fence messages too. Its terms count as verified: a
	// message up to them is handled without reading the term key. When it
	// is also a KeySource (the election is), the Subscriber's channel names
	// come from it. Used by Subscriber only. Default: nil.
	Terms TermSource
	// Holds, when set, is asked by a Subscriber for each routed message:
	// while it returns false the message is dropped unhandled and counted
	// (Subscriber.NotHeld). Pass the election's HoldsNodeID, so that a
	// process refused as a twin of a live one, or one that stepped aside,
	// handles nothing sent to the NodeID (docs/safety.md, "Twins and
	// restarts"). Used by Subscriber only. Default: nil, always handle.
	Holds func() bool
}

// TermSource tells the highest master term this process has observed by
// other means than the routing connection. A Subscriber trusts it: it must
// report only terms that Redis has shown (the term key, the lock, a lock
// script's reply), never a term taken from a notice or message alone, or a
// forged term would pass the Subscriber's verification. It must be safe for
// concurrent use and cheap: it is called once per routed message, and before
// each read of the term key.
type TermSource interface {
	ObservedTerm() int64
}

// Default values of Config.
const (
	DefaultPingInterval  = 15 * time.Second
	DefaultMaxRetryDelay = time.Second
	DefaultOpTimeout     = time.Second
	DefaultMaxBacklog    = subhub.DefaultMaxQueue
	minRetryDelay        = 10 * time.Millisecond
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		LockName:      DefaultLockName,
		SlavePrefix:   keyspace.DefaultSlavePrefix,
		PingInterval:  DefaultPingInterval,
		MaxRetryDelay: DefaultMaxRetryDelay,
		OpTimeout:     DefaultOpTimeout,
		MaxBacklog:    DefaultMaxBacklog,
		clock:         clock.Real{},
	}
}

// Validate reports every field that cannot be used, with its value, at
// once; the error wraps ErrInvalidConfig (and ErrInvalidName for a name).
// Zero values are valid: they mean the default.
func (c Config) Validate() error {
	errs := c.names().Check()
	if c.PingInterval < 0 {
		errs = append(errs, fmt.Errorf("PingInterval (%s) is negative", c.PingInterval))
	}
	if c.PingInterval > 0 && c.PingInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("PingInterval (%s) is below the minimum of 10ms", c.PingInterval))
	}
	if c.MaxRetryDelay < 0 {
		errs = append(errs, fmt.Errorf("MaxRetryDelay (%s) is negative", c.MaxRetryDelay))
	}
	if c.MaxRetryDelay > 0 && c.MaxRetryDelay < minRetryDelay {
		errs = append(errs, fmt.Errorf("MaxRetryDelay (%s) is below the first retry delay (%s)", c.MaxRetryDelay, minRetryDelay))
	}
	if c.OpTimeout < 0 {
		errs = append(errs, fmt.Errorf("OpTimeout (%s) is negative", c.OpTimeout))
	}
	if c.MaxBacklog < 0 {
		errs = append(errs, fmt.Errorf("MaxBacklog (%d) is negative", c.MaxBacklog))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

// withDefaults validates c and fills in its zero fields. The names come
// from the first of from that is a KeySource, when there is one, and carry
// the hash tag with a Redis Cluster client (route.Names.Resolve).
func (c Config) withDefaults(client redis.UniversalClient, from ...any) (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	n, err := c.names().Resolve(client, from...)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.LockName, c.SlavePrefix, c.Cluster = n.LockName, n.SlavePrefix, n.Cluster
	d := DefaultConfig()
	c.PingInterval = cmp.Or(c.PingInterval, d.PingInterval)
	c.MaxRetryDelay = cmp.Or(c.MaxRetryDelay, d.MaxRetryDelay)
	c.OpTimeout = cmp.Or(c.OpTimeout, d.OpTimeout)
	c.MaxBacklog = cmp.Or(c.MaxBacklog, d.MaxBacklog)
	c.clock = cmp.Or(c.clock, d.clock)
	return c, nil
}

// names returns the fields of c that name its channels.
func (c Config) names() route.Names {
	return route.Names{LockName: c.LockName, SlavePrefix: c.SlavePrefix, Cluster: c.Cluster}
}

// keys returns the names of c's channels and keys, the defaults applied to
// empty fields.
func (c Config) keys() keyspace.Keys { return c.names().Keys() }

// SlaveChannel returns the channel of the process processID under the
// default prefix: "worker:slave:<processID>", the specification's name.
// It does not validate processID; Router.Send and NewSubscriber do.
func SlaveChannel(processID string) string { return keyspace.Keys{}.SlaveChannel(processID) }

// SlaveChannel returns the channel of processID under c's prefix (the
// default prefix when c.SlavePrefix is empty).
func (c Config) SlaveChannel(processID string) string { return c.keys().SlaveChannel(processID) }

// MasterInbox returns the channel on which slaves report to the master:
// "<lock name>:master-inbox" (with the defaults applied to empty fields).
func (c Config) MasterInbox() string { return c.keys().MasterInbox }
