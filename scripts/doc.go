// Package scripts holds the Redis schema of herd: the key and channel names
// of one election (Keys) and the atomic Lua scripts that act on them.
//
// Every script lives in its own .lua file in this directory, embedded into
// the binary, with a header that lists its KEYS, its ARGV (with units) and
// its reply. The exported values are *redis.Script, so callers run them with
// Run, which tries EVALSHA first and falls back to EVAL once per connection
// when the server has not cached the script yet.
//
// Every script that writes more than once checks its writes against the
// user's ACL (redis.acl_check_cmd, Redis 7.0 and later and Valkey) before
// the first one, with the prelude writes.lua, and answers NOPERM naming the
// refused command when one is, so a refused script leaves Redis as it found
// it; access.lua asks the same of
// every command the election runs, once, at Start (QueueAccess). Terms and
// registry versions stay exact integers: none above MaxTerm is minted, and
// acquire.lua refuses a term key above it as garbage.
//
// Nothing here starts goroutines or keeps state; all values are safe for
// concurrent use.
package scripts
