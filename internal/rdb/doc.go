// Package rdb is herd's Redis data layer: the atomic Lua scripts that act on
// an election's keys, the typed functions that run them, and the parsers of
// what they store. The names of the keys and channels, the notices the
// scripts publish and the largest term are public, in package keyspace;
// everything here is herd's own and may change between commits.
//
// Every script lives in its own .lua file in this directory, embedded into
// the binary, with a header that lists its KEYS, its ARGV (with units) and
// its reply. Callers run them through the typed functions (Acquire, Renew,
// Check, RegistryPut, InboxSend, ...), which send EVALSHA first, fall back
// to EVAL once per connection when the server has not cached the script
// yet, and check the reply's shape (ErrUnexpectedReply otherwise).
//
// Every script that writes more than once checks its writes against the
// user's ACL (redis.acl_check_cmd, Redis 7.0 and later and Valkey) before
// the first one, with the prelude writes.lua, and answers NOPERM naming the
// refused command when one is, so a refused script leaves Redis as it found
// it; access.lua asks the same of
// every command the election runs, once, at Start (QueueAccess). Terms and
// registry versions stay exact integers: none above keyspace.MaxTerm is
// minted, and acquire.lua refuses a term key above it as garbage.
//
// Nothing here starts goroutines or keeps state; all values are safe for
// concurrent use.
package rdb
