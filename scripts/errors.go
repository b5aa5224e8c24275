package scripts

import (
	"errors"
	"fmt"
)

// Errors of this package. Match them with errors.Is.
var (
	// ErrNotMaster is the one "not master" error of herd:
	// masterelection.ErrNotMaster, registry.ErrNotMaster and
	// pubsub.ErrNotMaster are this value, so one errors.Is matches a refusal
	// from any package. It is matched when a process acts as master but is
	// not: by its own reckoning, or because Redis refused (ErrFenced).
	ErrNotMaster = errors.New("herd: not master")
	// ErrFenced is returned by Route, RouteBatch and the registry's fenced
	// writes when the writer no longer holds the lock under the term it
	// stamped; nothing was written or published. It matches ErrNotMaster.
	ErrFenced = fmt.Errorf("%w: redis refused: the lock is not held under this term", ErrNotMaster)
	// ErrUnexpectedReply is wrapped by every error about a script reply whose
	// shape is not the one its header documents.
	ErrUnexpectedReply = errors.New("scripts: unexpected reply")
	// ErrMalformedNotice is wrapped by ParseNotice's errors.
	ErrMalformedNotice = errors.New("scripts: malformed notice")
)
