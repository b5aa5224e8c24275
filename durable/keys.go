package durable

import (
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
)

// The names of durable's keys, all built from the election's lock name by
// keyspace.Keys: the inboxes, the set of inboxes, the dead letters.

// names returns the fields of c that name its keys.
func (c Config) names() route.Names { return route.Names{LockName: c.LockName, Cluster: c.Cluster} }

// keys returns the names of c's keys, the default lock name applied when
// c's is empty.
func (c Config) keys() keyspace.Keys { return c.names().Keys() }

// Inbox returns the name of the durable inbox (a Redis Stream) of
// processID under c's lock name: "<lock name>:inbox:<processID>", with the
// hash tag under Cluster. It does not validate processID.
func (c Config) Inbox(processID string) string { return c.keys().Inbox(processID) }
