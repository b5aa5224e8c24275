package assign

import "errors"

// Errors of the package. ErrInvalidInput (plan.go) is wrapped by Assign's
// errors about its arguments.
var (
	// ErrInvalidConfig is wrapped by every error of Config.Validate, and so
	// of NewPlanner and NewWorker.
	ErrInvalidConfig = errors.New("assign: invalid config")
	// ErrStarted is returned by OnAssigned after Start and by a second Start.
	ErrStarted = errors.New("assign: worker already started")
	// ErrHandlersRunning is wrapped by Worker.Stop when its ctx ended before
	// every OnAssigned handler returned: their ctxs had ended and the items
	// were released all the same.
	ErrHandlersRunning = errors.New("assign: OnAssigned handlers still running")
	// ErrSetLost is returned by AddItems and RemoveItems when Redis lost the
	// item set this Planner knew and the master has not put it back yet
	// (Planner.Restores); SetItems, which replaces the whole set, is never
	// refused.
	ErrSetLost = errors.New("assign: the item set was lost with Redis's data and is not back yet")
)
