package assign_test

import (
	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/masterelection"
)

// The real election satisfies the interfaces the package asks for.
var (
	_ assign.PlannerElection = (*masterelection.MasterElection)(nil)
	_ assign.WorkerElection  = (*masterelection.MasterElection)(nil)
)
