package masterelection

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
)

// faultMode is what a scriptFault does to a call it matches.
type faultMode int

const (
	faultNone      faultMode = iota
	faultFail                // the call fails at once without reaching Redis
	faultFailReply           // the call runs in Redis; its reply is replaced by an error
	faultDrop                // the request is lost: it never reaches Redis and no reply comes
	faultDropReply           // the call runs in Redis and its reply is lost
	faultRetried             // the call runs in Redis, its reply is lost, and it is sent again (go-redis's MaxRetries): the caller gets the second reply
)

// scriptFault is a go-redis hook on a node's real client that injects one
// fault into the calls of one script (EVALSHA, or EVAL of its source). A
// lost request or reply holds the call until its ctx ends or the test does,
// as a blackholed connection does.
type scriptFault struct {
	sha  string
	err  error // what a failed call returns
	done chan struct{}
	once sync.Once

	mu    sync.Mutex
	mode  faultMode
	left  int // calls still to fault; negative: every call
	count int // calls faulted
}

func newScriptFault(sha string, err error) *scriptFault {
	return &scriptFault{sha: sha, err: err, done: make(chan struct{}), left: -1}
}

// set makes the next n matching calls (every one when n < 0) suffer mode.
func (f *scriptFault) set(mode faultMode, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.left = mode, n
}

// faulted returns how many calls were faulted.
func (f *scriptFault) faulted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

// release ends every held call, as the end of a test ends its connections.
func (f *scriptFault) release() { f.once.Do(func() { close(f.done) }) }

// modeFor returns what to do with cmd, without counting it.
func (f *scriptFault) modeFor(cmd redis.Cmder) faultMode {
	args := cmd.Args()
	if len(args) < 2 {
		return faultNone
	}
	name, _ := args[0].(string)
	body := fmt.Sprint(args[1])
	switch strings.ToLower(name) {
	case "evalsha":
	case "eval":
		sum := sha1.Sum([]byte(body))
		body = hex.EncodeToString(sum[:])
	default:
		return faultNone
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if body != f.sha || f.left == 0 {
		return faultNone
	}
	return f.mode
}

// take counts one faulted call; false when no fault is left.
func (f *scriptFault) take() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == faultNone || f.left == 0 {
		return false
	}
	if f.left > 0 {
		f.left--
	}
	f.count++
	return true
}

// DialHook implements redis.Hook.
func (f *scriptFault) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (f *scriptFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (f *scriptFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		mode := f.modeFor(cmd)
		if mode == faultNone {
			return next(ctx, cmd)
		}
		if mode == faultRetried {
			if ran := next(ctx, cmd); ran != nil && strings.HasPrefix(ran.Error(), "NOSCRIPT") {
				return ran // not run: go-redis sends the script with EVAL, which is faulted
			}
			if !f.take() {
				return cmd.Err()
			}
			cmd.SetErr(nil)
			return next(ctx, cmd)
		}
		afterReply := mode == faultFailReply || mode == faultDropReply
		var ran error
		if afterReply {
			ran = next(ctx, cmd)
			if ran != nil && strings.HasPrefix(ran.Error(), "NOSCRIPT") {
				return ran // not run: go-redis sends the script with EVAL, which is faulted
			}
		}
		if !f.take() {
			if afterReply {
				return ran
			}
			return next(ctx, cmd)
		}
		err := f.err
		if mode == faultDrop || mode == faultDropReply {
			select {
			case <-ctx.Done():
			case <-f.done:
			}
			err = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout (injected: nothing came back)")}
		}
		cmd.SetErr(err)
		return err
	}
}

// askAlone is a go-redis hook that sends Start's questions without their
// attempt at the lock (rdb.AskTaking with no registry backend for any
// answer of the probe, so that the script does not make it): Start's
// first acquire then goes alone, in a call of its own (rdb.AcquireRegister),
// where a scriptFault reaches it.
type askAlone struct{}

// DialHook implements redis.Hook.
func (askAlone) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (askAlone) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (askAlone) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if scriptOf(cmd) == rdb.TakeSHA {
			// EVALSHA or EVAL, the script, the key count, the nine KEYS,
			// then ARGV: ARGV[6..9] are the backends per probe answer.
			args := cmd.Args()
			for i := 3 + 9 + 5; i < 3+9+9 && i < len(args); i++ {
				args[i] = ""
			}
		}
		return next(ctx, cmd)
	}
}
