package registry

import (
	"errors"
	"fmt"
	"time"

	"github.com/herdkit/herd/keyspace"
)

// The errors of the registry. Errors returned by this package wrap one of
// them, or a Redis or context error, and can be tested with errors.Is.
var (
	// ErrNotFound: there is no live entry for the process id, or no master.
	ErrNotFound = errors.New("registry: process not found")
	// ErrNotRegistered: Heartbeat was called for a process id that was not
	// registered through this Registry (or was unregistered since), so there
	// is no last known info to renew the entry from.
	ErrNotRegistered = errors.New("registry: process not registered through this registry")
	// ErrInvalidProcess: Register was given info that cannot be stored (an id
	// that would break a channel name, an unknown role, metadata that cannot
	// be encoded as JSON).
	ErrInvalidProcess = errors.New("registry: invalid process info")
	// ErrMetadataTooLarge: the metadata is larger than MaxMetadataBytes once
	// encoded as JSON.
	ErrMetadataTooLarge = errors.New("registry: metadata too large")
	// ErrCorruptEntry: a stored value is not a ProcessInfo JSON object (it is
	// not JSON, or JSON of the wrong shape), or a registry key holds another
	// type than herd writes (Redis answered WRONGTYPE; the error names the
	// key); something other than herd or a process following the
	// specification wrote it.
	ErrCorruptEntry = errors.New("registry: corrupt entry")
	// ErrBackendUnsupported: Config.Backend names a backend whose commands
	// the server does not run.
	ErrBackendUnsupported = errors.New("registry: backend not supported by the server")
	// ErrInvalidConfig: Config or TrackerConfig is inconsistent; the message
	// names the values.
	ErrInvalidConfig = errors.New("registry: invalid config")
	// ErrNotMaster: a registration or heartbeat with role master was refused
	// by Redis because the process does not hold the lock (Keys.Master) under
	// the term it wrote (Keys.Term); the entry was written with role slave
	// instead. The process was replaced as master (its lock expired or was
	// taken, during a pause say) and has not noticed yet. The error wraps
	// keyspace.ErrFenced too. ErrNotMaster is keyspace.ErrNotMaster, the same
	// value as masterelection.ErrNotMaster and pubsub.ErrNotMaster.
	ErrNotMaster = keyspace.ErrNotMaster
	// ErrUnconfirmedNotice: a SlaveTracker ignored a notice that the
	// registry contradicts, reported to its OnError: an "unregistered" notice
	// for a process whose entry is present and fresh, or a notice without a
	// version or with a version above every one Redis has minted, for an
	// entry the registry does not show. Notices come from pub/sub, on which
	// any client allowed to PUBLISH can write; the registry is the truth.
	ErrUnconfirmedNotice = errors.New("registry: notice not confirmed by the registry")
	// ErrInUse: a registration or heartbeat was refused because the live
	// entry of the process id carries another incarnation and was written
	// less than Config.Quiet ago: another process runs under the same id.
	// Nothing was written. The error is an *InUseError.
	ErrInUse = errors.New("registry: process id in use by another live process")
	// ErrTrackerRunning: SlaveTracker.Run was called while another Run of the
	// same tracker had not returned.
	ErrTrackerRunning = errors.New("registry: slave tracker already running")
)

// InUseError is the error of a write refused because another live process
// holds the entry (ErrInUse): it names the id, the other incarnation and how
// long ago its entry was written.
type InUseError struct {
	// ProcessID is the id written.
	ProcessID string
	// Incarnation is the incarnation of the live entry.
	Incarnation string
	// Identifier is the live entry's identifier ("" when none).
	Identifier string
	// Age is how long ago the live entry was last written, by Redis's clock.
	Age time.Duration
}

func (e *InUseError) Error() string {
	who := ""
	if e.Identifier != "" {
		who = fmt.Sprintf(" (%s)", e.Identifier)
	}
	return fmt.Sprintf("%v: %q is registered by incarnation %s%s, written %v ago", ErrInUse, e.ProcessID, e.Incarnation, who, e.Age)
}

// Unwrap returns ErrInUse.
func (e *InUseError) Unwrap() error { return ErrInUse }
