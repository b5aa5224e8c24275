package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

// RegistryView is what RegistryRead read, in one atomic step.
type RegistryView struct {
	// Entries are the live entries read: process id -> ProcessInfo JSON.
	Entries map[string]string
	// Removed are the ids the emulated expiry deleted before the read.
	Removed []string
	// Version is the registry's version counter as of the read: every
	// write with a version up to it is reflected in Entries, none after.
	// 0 when the counter is missing (nothing written since Redis lost its
	// data) or not a version (not a decimal below keyspace.MaxTerm: the scripts count
	// it as none too).
	Version int64
	// Master is the node id holding the master lock (keyspace.Keys.Master) at the
	// read, "" when none: a new master's entry still says slave until its
	// first write as master, and readers that list slaves leave it out.
	Master string
}

// RegistryRead reads the live entries of ids (every entry when ids is
// empty), the version counter and the lock's holder in one MULTI/EXEC, one
// round trip, so the entries are exactly those of Version. With expire (the emulated backend)
// registry_expire.lua runs first in the same transaction, so the read sees
// no expired entry.
func RegistryRead(ctx context.Context, c redis.Cmdable, k keyspace.Keys, expire bool, ids ...string) (RegistryView, error) {
	view, err := registryRead(ctx, c, k, expire, true, ids)
	if errors.Is(err, errNoScript) {
		// The server has not cached the expiry script: send it whole.
		view, err = registryRead(ctx, c, k, expire, false, ids)
	}
	return view, err
}

// registryReadName names RegistryRead's transaction in its errors.
const registryReadName = "registry read"

// errNoScript is registryRead's answer when the server has not cached the
// expiry script it named by its digest; RegistryRead then tries again with
// the source, so the error never leaves the package.
var errNoScript = errors.New("registry read: the expiry script is not cached")

// registryRead is one try of RegistryRead: it sends the transaction and
// reads its replies. With cached, the expiry script goes by its digest
// (EVALSHA), and the answer is errNoScript when the server lacks it;
// otherwise by its source (EVAL).
func registryRead(ctx context.Context, c redis.Cmdable, k keyspace.Keys, expire, cached bool, ids []string) (RegistryView, error) {
	pipe := c.TxPipeline()
	tx := queueRegistryRead(ctx, pipe, k, expire, cached, ids)
	_, _ = pipe.Exec(ctx) // errors are read per command
	var view RegistryView
	var err error
	if view.Removed, err = tx.removed(cached); err != nil {
		return RegistryView{}, err
	}
	if view.Entries, err = tx.entries(ids); err != nil {
		return RegistryView{}, err
	}
	if view.Version, err = readVersion(tx.version); err != nil {
		return RegistryView{}, err
	}
	if view.Master, err = readHolder(tx.holder); err != nil {
		return RegistryView{}, registryReadError(err)
	}
	return view, nil
}

// registryReadTx holds the commands of one RegistryRead transaction, whose
// replies are readable once it has run.
type registryReadTx struct {
	gone    *redis.Cmd                // registry_expire.lua; nil without expire
	all     *redis.MapStringStringCmd // HGETALL, when no ids were asked for
	some    *redis.SliceCmd           // HMGET of the ids, otherwise
	read    redis.Cmder               // all or some, whichever was queued
	version *redis.StringCmd          // GET Keys.ProcessesVersion
	holder  *redis.StringCmd          // GET Keys.Master
}

// queueRegistryRead queues RegistryRead's commands in pipe, in their order.
func queueRegistryRead(ctx context.Context, pipe redis.Pipeliner, k keyspace.Keys, expire, cached bool, ids []string) registryReadTx {
	tx := registryReadTx{gone: queueExpiry(ctx, pipe, k, expire, cached)}
	if len(ids) == 0 {
		tx.all = pipe.HGetAll(ctx, k.Processes)
		tx.read = tx.all
	} else {
		tx.some = pipe.HMGet(ctx, k.Processes, ids...)
		tx.read = tx.some
	}
	tx.version = pipe.Get(ctx, k.ProcessesVersion)
	tx.holder = pipe.Get(ctx, k.Master)
	return tx
}

// queueExpiry queues registry_expire.lua in pipe when expire is set (the
// emulated backend), by its digest when cached and by its source
// otherwise; it returns nil without expire.
func queueExpiry(ctx context.Context, pipe redis.Pipeliner, k keyspace.Keys, expire, cached bool) *redis.Cmd {
	switch {
	case !expire:
		return nil
	case cached:
		return pipe.EvalSha(ctx, registryExpireScript.Hash(), registryKeys(k), k.RegistryEvents)
	}
	return pipe.Eval(ctx, withWrites(registryExpireSrc), registryKeys(k), k.RegistryEvents)
}

// removed reads the reply of the expiry script: the ids it deleted; none
// when it was not queued.
func (tx registryReadTx) removed(cached bool) ([]string, error) {
	if tx.gone == nil {
		return nil, nil
	}
	if err := tx.gone.Err(); err != nil {
		return nil, tx.expiryError(err, cached)
	}
	removed, ok := appendStrings(nil, tx.gone.Val())
	if !ok {
		return nil, unexpected(registryReadName, tx.gone.Val())
	}
	return removed, nil
}

// expiryError is the error of the transaction whose expiry script failed
// with err: the refusal of the read when Redis refused to queue it (an ACL
// without HGETALL, say), which is the cause rather than the aborted
// transaction; errNoScript when the script, sent by its digest (cached),
// was not cached; err itself otherwise.
func (tx registryReadTx) expiryError(err error, cached bool) error {
	switch {
	case strings.HasPrefix(err.Error(), "EXECABORT") && queueRefused(tx.read):
		return registryReadError(tx.read.Err())
	case cached && noScript(err):
		return errNoScript
	}
	return fmt.Errorf("%s: expiry script: %w%s", registryReadName, err, aclHint(registryReadName, err))
}

// queueRefused reports whether Redis refused to queue cmd in a MULTI: its
// error is its own, not the EXECABORT of the whole transaction.
func queueRefused(cmd redis.Cmder) bool {
	err := cmd.Err()
	return err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "EXECABORT")
}

// entries reads the reply of HGETALL, or that of HMGET of ids
// (someEntries): the entries that exist, by process id.
func (tx registryReadTx) entries(ids []string) (map[string]string, error) {
	if tx.all != nil {
		entries, err := tx.all.Result()
		if err != nil {
			return nil, registryReadError(err)
		}
		return entries, nil
	}
	return someEntries(tx.some, ids)
}

// someEntries reads the reply of HMGET of ids: the entries that exist, by
// process id.
func someEntries(cmd *redis.SliceCmd, ids []string) (map[string]string, error) {
	vals, err := cmd.Result()
	if err != nil {
		return nil, registryReadError(err)
	}
	entries := make(map[string]string, len(ids))
	for i, v := range vals {
		if s, ok := v.(string); ok && i < len(ids) {
			entries[ids[i]] = s
		}
	}
	return entries, nil
}

// readVersion reads the registry's version counter: 0 when it is missing
// or not a version (RegistryView.Version).
func readVersion(cmd *redis.StringCmd) (int64, error) {
	v, err := cmd.Result()
	switch {
	case noString(err):
		return 0, nil
	case err != nil:
		return 0, registryReadError(err)
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n < keyspace.MaxTerm {
		return n, nil
	}
	return 0, nil
}

// noString reports whether err is a GET's answer that the key holds no
// string: it is missing (redis.Nil) or of another type (WRONGTYPE).
func noString(err error) bool {
	return errors.Is(err, redis.Nil) || err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// registryReadError wraps err, met by RegistryRead, with the transaction's
// name and the ACL hint.
func registryReadError(err error) error {
	return fmt.Errorf("%s: %w%s", registryReadName, err, aclHint(registryReadName, err))
}

// QueueHolder queues the read of the lock's holder (keyspace.Keys.Master) on pipe,
// for reads that must leave the master out; ReadHolder reads its answer.
func QueueHolder(ctx context.Context, pipe redis.Pipeliner, k keyspace.Keys) *redis.StringCmd {
	return pipe.Get(ctx, k.Master)
}

// ReadHolder returns the node id a queued QueueHolder read, "" when the
// lock is free or its key holds something that is not a string (garbage
// names no holder).
func ReadHolder(cmd *redis.StringCmd) (string, error) { return readHolder(cmd) }

// readHolder is ReadHolder.
func readHolder(cmd *redis.StringCmd) (string, error) {
	v, err := cmd.Result()
	switch {
	case noString(err):
		return "", nil
	case err != nil:
		return "", err
	}
	return v, nil
}
