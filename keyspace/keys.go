package keyspace

import (
	"fmt"
	"strings"
)

// DefaultLockName is the lock name of the specification: its keys are
// "master-election:master" and so on.
const DefaultLockName = "master-election"

// DefaultSlavePrefix is the prefix of the per-process channels of the
// specification: a process with id X receives routed messages on
// "worker:slave:X".
const DefaultSlavePrefix = "worker:slave:"

// Keys are the Redis key and channel names of one election, all derived from
// its lock name. Build them with NewKeys; never concatenate names elsewhere.
//
// With the lock name "master-election" they are the specification's names:
// "master-election:master", "master-election:heartbeat", and so on. With
// Cluster set, the prefix becomes the hash tag "{master-election}" so that
// every key of the election hashes to one slot and multi-key scripts run.
type Keys struct {
	// LockName is the election's lock name.
	LockName string
	// Prefix is the lock name, or "{lock name}" under Redis Cluster.
	Prefix string
	// SlavePrefix prefixes the per-process channels (SlaveChannel).
	// NewKeys sets DefaultSlavePrefix; WithSlavePrefix changes it.
	SlavePrefix string
	// Master holds the bare node id of the master, with the lock TTL.
	Master string
	// Heartbeat holds the master's last renewal time (ms since the epoch), with the lock TTL.
	Heartbeat string
	// MasterProcess holds the master's ProcessInfo as JSON, with the lock TTL.
	MasterProcess string
	// Term holds the last fencing term minted on this lock name; it has no TTL.
	Term string
	// Successor holds the node id a directed hand-over (Transfer) reserved
	// the free lock for, with the transfer window as TTL: until it expires
	// only that node can acquire.
	Successor string
	// Next holds the master's succession (Succession, as JSON): the slaves
	// that contend first, in order, when its lock is released or expires.
	// The master writes it when the order changes; it has no TTL, and a
	// succession of an older term is ignored.
	Next string
	// HandBack holds the term of the master that last handed over to a
	// process of higher priority (masterelection.Config.Priority), with
	// that master's HandBackWindow as TTL: while it lives no master hands
	// back again (handback.lua), so a preferred process that restarts in
	// a loop moves the mastership at most once per window.
	HandBack string
	// Processes is the hash of the process registry: process id -> ProcessInfo JSON.
	Processes string
	// ProcessesExpiry is the sorted set that emulates per-entry TTL on servers
	// without hash-field expiration: process id scored by its deadline (ms).
	ProcessesExpiry string
	// ProcessesVersion holds the last version a registry write minted; it
	// has no TTL. Every write (registry_put.lua, registry_remove.lua,
	// registry_expire.lua) mints max(this + 1, server TIME in microseconds),
	// so versions only grow on a lock name, also across deletions and, by
	// the server's clock, after Redis lost its data.
	ProcessesVersion string
	// Events is the pub/sub channel on which the lock scripts announce
	// acquire and release. Every process listens to it.
	Events string
	// RegistryEvents is the pub/sub channel on which the registry scripts
	// announce registrations and removals. Only the master listens to it, so
	// a fleet starting up does not fan every registration out to every
	// process.
	RegistryEvents string
	// MasterInbox is the pub/sub channel on which slaves report to the master.
	MasterInbox string
	// Control is the pub/sub channel of operators' requests to the master
	// (a remote Transfer).
	Control string
	// Inboxes is the set of the process ids that have a durable inbox
	// (Inbox): the scripts that write an inbox add its id, a Consumer adds
	// its own at Start, and the master's sweep removes the ids whose inbox
	// is gone. It is how the master finds every inbox without SCAN.
	Inboxes string
	// Dead is the dead-letter stream of durable routing: the entries a
	// Consumer gave up on after too many deliveries, each with its last
	// error, until an operator retries or drops it.
	Dead string
}

// NewKeys returns the names for lockName. When cluster is true the prefix is
// wrapped in braces, making it a Redis Cluster hash tag.
func NewKeys(lockName string, cluster bool) Keys {
	prefix := lockName
	if cluster {
		prefix = "{" + lockName + "}"
	}
	return Keys{
		LockName:         lockName,
		Prefix:           prefix,
		SlavePrefix:      DefaultSlavePrefix,
		Master:           prefix + ":master",
		Heartbeat:        prefix + ":heartbeat",
		MasterProcess:    prefix + ":master_process",
		Term:             prefix + ":term",
		Successor:        prefix + ":successor",
		Next:             prefix + ":next",
		HandBack:         prefix + ":handback",
		Processes:        prefix + ":processes",
		ProcessesExpiry:  prefix + ":processes:expiry",
		ProcessesVersion: prefix + ":processes:version",
		Events:           prefix + ":events",
		RegistryEvents:   prefix + ":registry-events",
		MasterInbox:      prefix + ":master-inbox",
		Control:          prefix + ":control",
		Inboxes:          prefix + ":inboxes",
		Dead:             prefix + ":dead",
	}
}

// Stored returns every key herd may write for this election (channels
// excluded), for tools that remove an election's data. The durable inboxes
// (Inbox) are not listed, since there is one per process id: the set
// Inboxes lists them, and InboxPattern matches them all.
func (k Keys) Stored() []string {
	return []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Successor, k.Next, k.HandBack,
		k.Processes, k.ProcessesExpiry, k.ProcessesVersion, k.Inboxes, k.Dead}
}

// InboxGroup is the consumer group of every durable inbox (Keys.Inbox): the
// process the inbox belongs to is its only consumer, under its process id.
const InboxGroup = "herd"

// Inbox returns the durable inbox of the process processID, the Redis Stream
// "<prefix>:inbox:<processID>" that package durable adds the master's
// messages to. It carries the election's prefix, so under Cluster it hashes
// to the lock's slot and one script can check the lock and write the inbox.
// Every inbox name is built here.
func (k Keys) Inbox(processID string) string { return k.Prefix + ":inbox:" + processID }

// Turn returns the pub/sub channel "<prefix>:events:<nodeID>" of one
// process's own lock notices: release.lua announces a release there, to the
// processes the master ranked in its succession, instead of to every
// process on Events (see release.lua). Every process listens to its own.
func (k Keys) Turn(nodeID string) string { return k.Events + ":" + nodeID }

// TurnPattern is a PSUBSCRIBE pattern that matches every process's own
// notice channel (Turn): an observer that wants every release subscribes
// to it as well as to Events.
func (k Keys) TurnPattern() string { return k.Turn("*") }

// InboxPattern is a SCAN MATCH pattern that matches every durable inbox of
// this election: "<prefix>:inbox:*". Keys of another election whose lock
// name begins with "<lock name>:inbox:" match it too.
func (k Keys) InboxPattern() string { return k.Inbox("*") }

// AssignKeys are the names of one item set of package assign: the items,
// the master's plan, and each item's owner. They carry the election's
// prefix, so under Cluster they hash to the lock's slot and one script can
// check the lock and write the plan.
type AssignKeys struct {
	// Items is the set of the items to assign.
	Items string
	// Version counts the changes of Items (a string, INCR): it exists once
	// the set was written, even emptied, so that a set Redis lost (neither
	// key exists) is told apart from an empty one.
	Version string
	// Plan is the master's plan: a hash, item -> slave id.
	Plan string
	// Own is the ownership of each item: a hash, item -> "<deadline ms>
	// <slave id>", the deadline on the server's clock.
	Own string
	// planPrefix and heldPrefix prefix PlanOf and Held.
	planPrefix, heldPrefix string
}

// Assign returns the keys of the item set named set: "<prefix>:assign:<set>:…".
func (k Keys) Assign(set string) AssignKeys {
	base := k.Prefix + ":assign:" + set
	return AssignKeys{Items: base + ":items", Version: base + ":version", Plan: base + ":plan", Own: base + ":own",
		planPrefix: base + ":plan:", heldPrefix: base + ":held:"}
}

// PlanOf returns the set of the items the plan gives slave id. A channel of
// the same name is slave id's assign notice channel: assign_plan publishes
// "plan" on it when the set changes, assign_sync "free" when an item
// planned for id is given up.
func (a AssignKeys) PlanOf(id string) string { return a.planPrefix + id }

// Held returns the set of the items slave id may own.
func (a AssignKeys) Held(id string) string { return a.heldPrefix + id }

// Cluster reports whether k carries a Redis Cluster hash tag.
func (k Keys) Cluster() bool { return strings.HasPrefix(k.Prefix, "{") }

// WithSlavePrefix returns k with the per-process channels under prefix; an
// empty prefix keeps k's.
func (k Keys) WithSlavePrefix(prefix string) Keys {
	if prefix != "" {
		k.SlavePrefix = prefix
	}
	return k
}

// SlaveChannel returns the routing channel of the process processID:
// "worker:slave:<processID>" with the default prefix, the specification's
// name. Every channel name of a process is built here.
func (k Keys) SlaveChannel(processID string) string {
	prefix := k.SlavePrefix
	if prefix == "" {
		prefix = DefaultSlavePrefix
	}
	return prefix + processID
}

// MaxNameLen is the longest name ValidateName accepts, in bytes: a lock
// name, a node id, a process id. pubsub.MaxNameLen is the same limit, which
// the envelopes apply to their ids.
const MaxNameLen = 256

// ValidateName reports whether s can be used inside a key or channel name:
// it must not be empty or blank, longer than MaxNameLen bytes, and must not
// contain whitespace, control characters or the glob characters * ? [ ] that
// would make a channel name a pattern. what names the value in the error
// ("LockName", "NodeID", ...).
func ValidateName(what, s string) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%s is %d bytes long, the limit is %d", what, len(s), MaxNameLen)
	}
	for _, r := range s {
		if err := checkNameRune(what, s, r); err != nil {
			return err
		}
	}
	return nil
}

// checkNameRune returns the error of ValidateName for the name s of what
// when r, one of its runes, may not be in a name; nil when it may.
func checkNameRune(what, s string, r rune) error {
	switch {
	case r == '*' || r == '?' || r == '[' || r == ']':
		return fmt.Errorf("%s %q contains the glob character %q", what, s, r)
	case r == '"' || r == '\\':
		return fmt.Errorf("%s %q contains the character %q, which JSON notices would have to escape", what, s, r)
	case r <= ' ' || r == 0x7f || r == 0x85 || r == 0xa0 || r == 0x2028 || r == 0x2029:
		return fmt.Errorf("%s %q contains whitespace or a control character", what, s)
	}
	return nil
}

// TermKeyPattern is a SCAN MATCH pattern that matches Keys.Term of every
// lock name, with or without a Cluster hash tag. Operator tools use it to
// list the lock names of the herds on a server; other keys may match it too,
// so check each with LockNameOfTermKey. (TestLockNameOfTermKey checks that
// it ends as NewKeys writes Term.)
const TermKeyPattern = "*:term"

// LockNameOfTermKey returns the lock name whose Keys.Term is key, with or
// without the Cluster hash tag, and false when key is no herd term key name
// (the suffix is missing, or the lock name would not pass ValidateName).
func LockNameOfTermKey(key string) (string, bool) {
	name, ok := strings.CutSuffix(key, NewKeys("", false).Term)
	if !ok {
		return "", false
	}
	if tagged, ok := strings.CutPrefix(name, "{"); ok {
		if name, ok = strings.CutSuffix(tagged, "}"); !ok {
			return "", false
		}
	}
	if ValidateName("lock name", name) != nil {
		return "", false
	}
	return name, true
}
