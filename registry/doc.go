// Package registry is herd's process registry: every process of an election
// announces itself (role, capabilities, last heartbeat) in one Redis hash and
// stays listed only while it heartbeats.
package registry
