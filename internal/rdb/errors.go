package rdb

import "errors"

// ErrUnexpectedReply is wrapped by every error about a script reply whose
// shape is not the one its header documents. Match it with errors.Is.
var ErrUnexpectedReply = errors.New("rdb: unexpected reply")
