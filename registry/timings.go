package registry

import (
	"fmt"
	"time"
)

// ValidateTimings checks the timing relations the registry relies on:
//
//   - processTTL > 2 × heartbeat, so that one late or lost heartbeat does not
//     let a live process's entry expire;
//   - slaveTimeout > heartbeat, so that the master does not remove a slave
//     between two of its heartbeats (the specification uses 3 × heartbeat).
//
// heartbeat is the longest interval at which any process renews its entry
// (the slaves' CheckInterval or the master's HeartbeatInterval, whichever is
// longer). All three must be positive. Errors wrap ErrInvalidConfig and name
// both values of the broken relation.
func ValidateTimings(processTTL, heartbeat, slaveTimeout time.Duration) error {
	switch {
	case processTTL <= 0:
		return fmt.Errorf("%w: ProcessTTL %s must be positive", ErrInvalidConfig, processTTL)
	case heartbeat <= 0:
		return fmt.Errorf("%w: heartbeat interval %s must be positive", ErrInvalidConfig, heartbeat)
	case slaveTimeout <= 0:
		return fmt.Errorf("%w: SlaveTimeout %s must be positive", ErrInvalidConfig, slaveTimeout)
	case processTTL <= 2*heartbeat:
		return fmt.Errorf("%w: ProcessTTL %s must exceed twice the heartbeat interval %s", ErrInvalidConfig, processTTL, heartbeat)
	case slaveTimeout <= heartbeat:
		return fmt.Errorf("%w: SlaveTimeout %s must exceed the heartbeat interval %s", ErrInvalidConfig, slaveTimeout, heartbeat)
	}
	return nil
}
