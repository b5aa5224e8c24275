package route

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/keyspace"
)

// MaxNameLen is the longest id, from, type and slave id, in bytes:
// keyspace.MaxNameLen (pubsub.MaxNameLen).
const MaxNameLen = keyspace.MaxNameLen

// CheckName validates one name that ends up in a channel, a key or an
// envelope; the error wraps ErrInvalidName.
func CheckName(what, s string) error {
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s is %d bytes long, the limit is %d", ErrInvalidName, what, len(s), MaxNameLen)
	}
	if err := keyspace.ValidateName(what, s); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	return nil
}

// CheckClient refuses a nil client, typed or not, with the error "<fn>:
// client is nil" (fn: "pubsub: NewRouter").
func CheckClient(fn string, client redis.UniversalClient) error {
	if nilclient.Is(client) {
		return errors.New(fn + ": client is nil")
	}
	return nil
}

// CheckNode refuses what a receiver cannot be built from: a nil client, or
// a process id that cannot be a name (fn as for CheckClient).
func CheckNode(fn string, client redis.UniversalClient, processID string) error {
	if err := CheckClient(fn, client); err != nil {
		return err
	}
	return CheckName("process id", processID)
}

// CheckMastership refuses what a Router cannot be built from: a nil client or
// mastership, or a mastership whose NodeID cannot be a name (fn as for
// CheckClient).
func CheckMastership(fn string, client redis.UniversalClient, mastership Mastership) error {
	if err := CheckClient(fn, client); err != nil {
		return err
	}
	if mastership == nil {
		return errors.New(fn + ": mastership is nil")
	}
	return CheckName("mastership NodeID", mastership.NodeID())
}

// KeySource gives the Redis names of an election (pubsub.KeySource).
type KeySource interface {
	Keys() keyspace.Keys
}

// Names are the fields of a transport's Config that name its channels and
// keys.
type Names struct {
	// LockName is the election's lock name; "" for the default.
	LockName string
	// SlavePrefix is the prefix of the slave channels; "" for the default.
	SlavePrefix string
	// Cluster wraps the lock name in a Redis Cluster hash tag.
	Cluster bool
}

// Check reports the names that cannot be used, each as an error wrapping
// ErrInvalidName; empty names are valid (the default).
func (n Names) Check() []error {
	var errs []error
	for _, f := range []struct{ what, v string }{{"LockName", n.LockName}, {"SlavePrefix", n.SlavePrefix}} {
		if f.v == "" {
			continue
		}
		if err := CheckName(f.what, f.v); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Resolve returns n as a transport uses it: the names of the first of from
// that is a KeySource, when there is one (a name set in n must agree with
// it), Cluster set with a Redis Cluster client (so the names carry the
// same hash tag as the election's, which detects the client too), and the
// defaults for what is still empty. The error names the field that
// disagrees; the caller wraps it with its ErrInvalidConfig.
func (n Names) Resolve(client redis.UniversalClient, from ...any) (Names, error) {
	if k, ok := electionKeys(from); ok {
		if err := n.agree(k); err != nil {
			return Names{}, err
		}
		n = Names{LockName: k.LockName, SlavePrefix: k.SlavePrefix, Cluster: k.Cluster()}
	}
	if _, ok := client.(*redis.ClusterClient); ok {
		n.Cluster = true
	}
	return n.withDefaults(), nil
}

// electionKeys returns the names of the first of from that is a
// KeySource; ok is false when none is.
func electionKeys(from []any) (k keyspace.Keys, ok bool) {
	for _, f := range from {
		if src, ok := f.(KeySource); ok {
			return src.Keys(), true
		}
	}
	return keyspace.Keys{}, false
}

// agree returns an error naming the first name set in n that differs from
// the election's in k, or nil.
func (n Names) agree(k keyspace.Keys) error {
	if err := sameName("LockName", n.LockName, k.LockName); err != nil {
		return err
	}
	return sameName("SlavePrefix", n.SlavePrefix, k.SlavePrefix)
}

// sameName refuses the name field of a Config, set to v, when it is not
// empty and differs from the election's, elected.
func sameName(field, v, elected string) error {
	if v != "" && v != elected {
		return fmt.Errorf("%s %q differs from the election's %q; leave it empty", field, v, elected)
	}
	return nil
}

// withDefaults fills in the empty names.
func (n Names) withDefaults() Names {
	if n.LockName == "" {
		n.LockName = keyspace.DefaultLockName
	}
	if n.SlavePrefix == "" {
		n.SlavePrefix = keyspace.DefaultSlavePrefix
	}
	return n
}

// Keys returns the keys and channels of n, the defaults filled in.
func (n Names) Keys() keyspace.Keys {
	n = n.withDefaults()
	return keyspace.NewKeys(n.LockName, n.Cluster).WithSlavePrefix(n.SlavePrefix)
}
