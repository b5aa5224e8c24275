package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

// askSrc is Start's five questions in one script: access.lua,
// registry_probe.lua, INFO memory, check.lua and the process's own registry
// entry with the server's time, each file run unchanged as
// a function of its own KEYS and ARGV, each under pcall so that one
// question's error (a command the ACL refuses, garbage in a key, a server
// without INFO in scripts) is that question's answer only.
//
// KEYS  -> access.lua's nine KEYS (master, heartbeat, master_process, term,
//
//	successor, processes, processes:expiry, processes:version, next)
//
// ARGV[1], ARGV[2], ARGV[3] -> access.lua's ARGV (the events, registry
//
//	events and own notice channels)
//
// ARGV[4] -> registry_probe.lua's ARGV[1] (the field it writes and deletes)
// ARGV[5] -> the process's own id (its registry field)
// Returns: five answers, each {1, reply} or {0, error text}: access, probe,
//
//	INFO memory, check, and {entry or "", server TIME in microseconds}.
var askSrc = `local function access(KEYS, ARGV)
` + accessSrc + `
end
local function probe(KEYS, ARGV)
` + registryProbeSrc + `
end
local function check(KEYS, ARGV)
` + checkSrc + `
end
local function info()
  -- As a refused INFO outside a script says it (scripts say it otherwise).
  if redis.acl_check_cmd and not redis.acl_check_cmd('INFO', 'memory') then
    return redis.error_reply("NOPERM this user has no permissions to run the 'info' command")
  end
  return redis.call('INFO', 'memory')
end
local function own()
  local t = redis.call('TIME')
  return {redis.call('HGET', KEYS[6], ARGV[5]) or '', tonumber(t[1]) * 1000000 + tonumber(t[2])}
end
local function answer(ok, v)
  if ok and not (type(v) == 'table' and v.err) then return {1, v} end
  if type(v) == 'table' then v = v.err end
  return {0, tostring(v)}
end
return {
  answer(pcall(access, KEYS, ARGV)),
  answer(pcall(probe, {KEYS[6]}, {ARGV[4]})),
  answer(pcall(info)),
  answer(pcall(check, {KEYS[1], KEYS[4], KEYS[9]}, {})),
  answer(pcall(own)),
}
`

// AskSHA is the digest by which Redis caches Ask's script.
var AskSHA = redis.NewScript(askSrc).Hash()

// Asked is the answers of Ask, each read as the call it replaces would be.
type Asked struct {
	Access *AccessCall
	Probe  *RegistryProbeCall
	Info   *redis.StringCmd // INFO memory
	Check  *CheckCall
	// Own is the process's own registry entry ("" when none) and the
	// server's time, read in the same script.
	Own *OwnEntry
}

// OwnEntry is the answer of Ask's last question: the raw registry entry of
// the process's id and the server's time when it was read.
type OwnEntry struct{ cmd *redis.Cmd }

// Result returns the entry ("" when there is none) and the server's time.
func (o *OwnEntry) Result() (entry string, now time.Time, err error) {
	v, err := o.cmd.Result()
	if err != nil {
		return "", time.Time{}, err
	}
	f := fieldsOf(v, 2)
	entry, us := f.strAt(0), f.intAt(1)
	if !f.ok {
		return "", time.Time{}, unexpected("own entry", v)
	}
	return entry, time.UnixMicro(us), nil
}

// Ask puts masterelection's Start questions to the server c reaches in one
// script call, one round trip on a connection of the client's main pool:
// which commands the ACL refuses (QueueAccess, with ownTurn, the process's
// own notice channel keyspace.Keys.Turn), the registry backend probe
// (QueueRegistryProbe), INFO memory, the lock check (QueueCheck) and the
// registry entry of ownID with the server's time (Asked.Own). A
// pipeline would do it in one round trip too, but go-redis gives pipelines
// a pool of their own, whose connection then stays open, idle, for the
// client's life: a connection per process that a herd of thousands pays
// for nothing. It sends EVAL with the source (a server that has it cached
// finds it by digest), so it needs no NOSCRIPT fallback. An error of the
// call itself (a refused connection, a user who may not EVAL) is every
// answer's error.
func Ask(ctx context.Context, c redis.Scripter, k keyspace.Keys, ownTurn, ownID string) Asked {
	keys := []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Successor, k.Processes, k.ProcessesExpiry, k.ProcessesVersion, k.Next}
	reply, err := c.Eval(ctx, askSrc, keys, k.Events, k.RegistryEvents, ownTurn, registryProbeField, ownID).Result()
	parts := answers(ctx, reply, err)
	return Asked{
		Access: &AccessCall{cmd: parts[0]},
		Probe:  &RegistryProbeCall{cmd: parts[1]},
		Info:   textOf(ctx, parts[2]),
		Check:  &CheckCall{k: k, cmd: parts[3]},
		Own:    &OwnEntry{cmd: parts[4]},
	}
}

// answers splits the reply of askSrc, or the error of its call, into one
// command per question, each with its own answer; an error of the call,
// or a reply of another shape, is every answer's.
func answers(ctx context.Context, reply any, err error) [5]*redis.Cmd {
	var parts [5]*redis.Cmd
	arr, ok := array(reply, len(parts))
	if err == nil && !ok {
		err = unexpected("start questions", reply)
	}
	for i := range parts {
		parts[i] = redis.NewCmd(ctx)
		if err != nil {
			parts[i].SetErr(err)
			continue
		}
		setAnswer(parts[i], arr[i], reply)
	}
	return parts
}

// setAnswer gives cmd a question's answer a, {1, reply} or {0, error text},
// as the question's call alone would have been answered; reply, the whole
// reply, is quoted when a has another shape.
func setAnswer(cmd *redis.Cmd, a, reply any) {
	arr, ok := array(a, 2)
	if !ok {
		cmd.SetErr(unexpected("start questions", reply))
		return
	}
	if answered, _ := arr[0].(int64); answered == 1 {
		cmd.SetVal(arr[1])
		return
	}
	cmd.SetErr(answerError(fmt.Sprint(arr[1])))
}

// textOf is cmd, the answer of INFO, as the string command INFO alone
// would have given.
func textOf(ctx context.Context, cmd *redis.Cmd) *redis.StringCmd {
	text := redis.NewStringCmd(ctx)
	s, err := cmd.Text()
	text.SetVal(s)
	text.SetErr(err)
	return text
}

// answerError is the error a question of Ask was answered with: the
// server's answer (a redis.Error), as the error reply of the command alone
// would have been.
type answerError string

// Error returns the server's answer as it came.
func (e answerError) Error() string { return string(e) }

// RedisError marks answerError as a server's answer (redis.Error).
func (answerError) RedisError() {}
