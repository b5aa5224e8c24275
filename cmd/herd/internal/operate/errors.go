package operate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// The errors an operator can act on, one per exit status. Errors returned by
// this package wrap at most one of them.
var (
	// ErrUsage: a command, flag or argument is wrong.
	ErrUsage = errors.New("usage")
	// ErrBadURL: the -redis URL cannot be parsed.
	ErrBadURL = errors.New("bad Redis URL")
	// ErrUnreachable: no connection to Redis (refused, unknown host,
	// timeout, TLS handshake).
	ErrUnreachable = errors.New("cannot reach Redis")
	// ErrAuth: Redis refused the user name or password.
	ErrAuth = errors.New("authentication refused")
	// ErrACL: Redis's ACL refused a command, key or channel to the user.
	ErrACL = errors.New("permission denied by the Redis ACL")
	// ErrUnknownLock: nothing exists under the lock name: no term, no
	// master, no registered process.
	ErrUnknownLock = errors.New("unknown lock name")
	// ErrUnknownSet: no key of the item set exists under the lock name: no
	// item, no plan, no owner. It has ErrUnknownLock's exit status.
	ErrUnknownSet = errors.New("unknown item set")
	// ErrNotDelivered: a step-down request has nobody to act on it: no
	// master, no live process of the name asked for, or no process listens
	// on the control channel.
	ErrNotDelivered = errors.New("step-down not delivered")
	// ErrStepDownTimeout: no new master within the step-down's timeout.
	ErrStepDownTimeout = errors.New("no new master in time")
	// ErrOtherMaster: a new master was elected, but not the one asked for
	// (or the same process took the lock back).
	ErrOtherMaster = errors.New("another master than asked for")
)

// Exit statuses of the herd command; each is documented in `herd -h` and
// docs/operating.md.
const (
	ExitOK             = 0  // success
	ExitError          = 1  // any other error
	ExitUsage          = 2  // bad command, flag or argument
	ExitBadURL         = 3  // the -redis URL cannot be parsed
	ExitUnreachable    = 4  // no connection to Redis
	ExitAuth           = 5  // wrong user name or password
	ExitACL            = 6  // refused by the ACL
	ExitUnknownLock    = 7  // nothing under the lock name, or no such item set
	ExitNotDelivered   = 8  // step-down: no master, no such process, or nobody listens
	ExitTimeout        = 9  // step-down: no new master within -timeout
	ExitOtherMaster    = 10 // step-down: the new master is not the one asked for
	ExitInterruptedRun = 130
)

var exitCodes = []struct {
	err  error
	code int
}{
	{ErrUsage, ExitUsage},
	{ErrBadURL, ExitBadURL},
	{ErrUnreachable, ExitUnreachable},
	{ErrAuth, ExitAuth},
	{ErrACL, ExitACL},
	{ErrUnknownLock, ExitUnknownLock},
	{ErrUnknownSet, ExitUnknownLock},
	{ErrNotDelivered, ExitNotDelivered},
	{ErrStepDownTimeout, ExitTimeout},
	{ErrOtherMaster, ExitOtherMaster},
}

// ExitCode returns the exit status for err: ExitOK for nil, the status of
// the Err* value it wraps, else ExitError.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	for _, e := range exitCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return ExitError
}

// kindError is an error of Redis or the network, tagged with one of the
// Err* values. Its message is the hint followed by the cause.
type kindError struct {
	kind  error
	hint  string
	cause error
}

func (e *kindError) Error() string {
	if e.hint == "" {
		return e.kind.Error() + ": " + e.cause.Error()
	}
	return e.kind.Error() + ": " + e.hint + ": " + e.cause.Error()
}

func (e *kindError) Unwrap() []error { return []error{e.kind, e.cause} }

// Classify tags err, an error of a Redis call made while doing what, with
// the Err* value that says what went wrong, when it is one of the known
// cases (a refused or failed connection, a refused password, an ACL
// refusal); other errors are returned wrapped with what.
func Classify(what string, err error) error {
	if err == nil {
		return nil
	}
	for _, k := range exitCodes {
		if errors.Is(err, k.err) {
			return err // classified already
		}
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "NOAUTH"),
		strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"),
		strings.Contains(msg, "without any password configured"):
		return &kindError{ErrAuth, what + ": check the user and password of -redis", err}
	case strings.Contains(msg, "NOPERM"), strings.Contains(msg, "can't run this command"),
		strings.Contains(msg, "ACL failure in script"):
		return &kindError{ErrACL, what + ": the Redis user lacks a permission (docs/operating.md lists what each command needs)", err}
	case unreachable(err):
		return &kindError{ErrUnreachable, what, err}
	}
	return &kindError{errors.New(what), "", err}
}

// unreachable reports whether err says that no connection to the server
// could be made or kept.
func unreachable(err error) bool {
	var (
		opErr   *net.OpError
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		unkAuth x509.UnknownAuthorityError
		hostErr x509.HostnameError
		recErr  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr), errors.As(err, &certErr),
		errors.As(err, &unkAuth), errors.As(err, &hostErr), errors.As(err, &recErr):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "i/o timeout") ||
		strings.Contains(msg, "no such host") || strings.Contains(msg, "redis: all sentinels") ||
		strings.Contains(msg, "redis: connection pool timeout")
}
