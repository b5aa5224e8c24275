package keyspace

import (
	"errors"
	"fmt"
)

// Errors of herd's data in Redis. Match them with errors.Is.
var (
	// ErrNotMaster is the one "not master" error of herd:
	// masterelection.ErrNotMaster, registry.ErrNotMaster and
	// pubsub.ErrNotMaster are this value, so one errors.Is matches a refusal
	// from any package. It is matched when a process acts as master but is
	// not: by its own reckoning, or because Redis refused (ErrFenced).
	ErrNotMaster = errors.New("herd: not master")
	// ErrFenced is wrapped by the error of every write herd fences with a
	// term (pubsub's and durable's sends, the registry's master entry,
	// assign's plan) when Redis found that the writer no longer holds the
	// lock (Keys.Master) under the term it stamped (Keys.Term): nothing was
	// written or published. It matches ErrNotMaster.
	ErrFenced = fmt.Errorf("%w: redis refused: the lock is not held under this term", ErrNotMaster)
	// ErrMalformedNotice is wrapped by ParseNotice's errors.
	ErrMalformedNotice = errors.New("keyspace: malformed notice")
)
