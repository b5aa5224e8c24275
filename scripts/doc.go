// Package scripts holds the Redis schema of herd: the key and channel names
// of one election (Keys) and the atomic Lua scripts that act on them.
//
// Every script lives in its own .lua file in this directory, embedded into
// the binary, with a header that lists its KEYS, its ARGV (with units) and
// its reply. The exported values are *redis.Script, so callers run them with
// Run, which tries EVALSHA first and falls back to EVAL once per connection
// when the server has not cached the script yet.
//
// Nothing here starts goroutines or keeps state; all values are safe for
// concurrent use.
package scripts
