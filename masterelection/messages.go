package masterelection

import (
	"context"
	"fmt"

	"github.com/herdkit/herd/keyspace"
)

// notice is a lock notice of the events channel (keyspace.Notice), with
// the payload it was read from, for reports. This file holds all there is
// about notices: the feed they arrive by, what each loop makes of one, and
// the claims they carry, which Redis confirms or refutes.
type notice struct {
	keyspace.Notice
	raw []byte
}

func parseNotice(payload string) (notice, error) {
	n, err := keyspace.ParseNotice([]byte(payload))
	if err != nil {
		return notice{}, fmt.Errorf("%w: on the events channel: %w", ErrGarbage, err)
	}
	return notice{Notice: n, raw: []byte(payload)}, nil
}

// transferRequest asks the master loop to hand over to a successor ("" for
// none).
type transferRequest struct {
	to     string
	done   chan error // Transfer's answer; nil for a request from the control channel or a hand-back
	reason string     // why the mastership ends, when not the plain "transferred to <to>"
}

func (r transferRequest) reply(err error) {
	if r.done != nil {
		r.done <- err
	}
}

// stopRequest is Stop's request that the election loop end the mastership
// before anything of the election stops (resignFirst).
type stopRequest struct {
	ctx  context.Context // Stop's: bounds the wait for the handlers and the release
	err  error           // the resignation's error; written before done closes
	done chan struct{}   // closed when the loop has handled the request
}
