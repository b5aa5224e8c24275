package durable_test

import (
	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

// The real election satisfies the interfaces a Router and Maintain ask for.
var (
	_ pubsub.Mastership  = (*masterelection.MasterElection)(nil)
	_ pubsub.SlaveLister = (*masterelection.MasterElection)(nil)
	_ pubsub.KeySource   = (*masterelection.MasterElection)(nil)
	_ pubsub.TermSource  = (*masterelection.MasterElection)(nil)
	_ durable.Events     = (*masterelection.MasterElection)(nil)
)
