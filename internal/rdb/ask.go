package rdb

import (
	"context"
	"fmt"
	"slices"
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
var askSrc = askQuestions + `return asked()
`

// askQuestions defines asked(), which returns askSrc's five answers.
var askQuestions = `local function access(KEYS, ARGV)
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
local function asked()
  return {
    answer(pcall(access, KEYS, ARGV)),
    answer(pcall(probe, {KEYS[6]}, {ARGV[4]})),
    answer(pcall(info)),
    answer(pcall(check, {KEYS[1], KEYS[4], KEYS[9]}, {})),
    answer(pcall(own)),
  }
end
`

// takeSrc is askSrc and, when its answers allow, the acquire with a
// registration (acquireRegisterSrc) in the same script call: Start's
// questions and its first attempt at the lock in one round trip. The
// attempt is made when the user's ACL refuses nothing the election runs,
// the probe answered and the registry has a backend on that answer (below),
// and the process's id has no registry entry (a twin's or a crashed
// incarnation's: Start then takes the path that waits for it).
// acquire.lua itself leaves a lock that is held, reserved for another
// node, or guarded by a term that is garbage or below the one seen.
//
// KEYS[1..9] -> askSrc's KEYS; acquireRegisterSrc's are KEYS[1..8]
// ARGV[1..5] -> askSrc's ARGV
// ARGV[6..9] -> the registry's backend (registry_put.lua's ARGV[1]) for each
//
//	answer of the probe: neither, HPEXPIRE only, HSETEX only, both; ""
//	when the registry has none for that answer
//
// ARGV[10..] -> acquireRegisterSrc's ARGV; the backend its registration
//
//	is written with (its ARGV[6]) is replaced by the one chosen above
//
// Returns: askSrc's five answers and, when the attempt was made, a sixth,
// {1, acquireRegisterSrc's reply} or {0, error text}.
var takeSrc = withWrites(askQuestions + `local function acquireRegister(KEYS, ARGV)
` + acquireRegisterBody + `
end
local res = asked()
local refusals, probed, entry = res[1], res[2], res[5]
if refusals[1] ~= 1 or #refusals[2] > 0 or probed[1] ~= 1 or entry[1] ~= 1 or entry[2][1] ~= '' then
  return res
end
local mode = ARGV[6 + 2 * probed[2][1] + probed[2][2]]
if mode == '' then
  return res
end
local aargv = {}
for i = 10, #ARGV do
  aargv[#aargv + 1] = ARGV[i]
end
aargv[6] = mode
res[6] = answer(pcall(acquireRegister, {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]}, aargv))
return res
`)

var takeScript = redis.NewScript(takeSrc)

// TakeSHA is the digest by which EVALSHA names Ask's script with Start's
// first attempt at the lock (AskTaking).
var TakeSHA = takeScript.Hash()

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
	reply, err := c.Eval(ctx, askSrc, askKeys(k), askArgs(k, ownTurn, ownID)...).Result()
	parts, _, _ := answers(ctx, reply, err, false)
	return asked(ctx, k, parts)
}

// askKeys and askArgs are the KEYS and ARGV of askSrc.
func askKeys(k keyspace.Keys) []string {
	return []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Successor, k.Processes, k.ProcessesExpiry, k.ProcessesVersion, k.Next}
}

func askArgs(k keyspace.Keys, ownTurn, ownID string) []any {
	return []any{k.Events, k.RegistryEvents, ownTurn, registryProbeField, ownID}
}

// asked is Ask's answers, parts being the commands answers made of them.
func asked(ctx context.Context, k keyspace.Keys, parts [5]*redis.Cmd) Asked {
	return Asked{
		Access: &AccessCall{cmd: parts[0]},
		Probe:  &RegistryProbeCall{cmd: parts[1]},
		Info:   textOf(ctx, parts[2]),
		Check:  &CheckCall{k: k, cmd: parts[3]},
		Own:    &OwnEntry{cmd: parts[4]},
	}
}

// Take is Start's first attempt at the lock, which AskTaking makes in the
// script call of Ask's questions when their answers allow it (takeSrc):
// AcquireRegister's arguments, and the registry backend to write the
// registration with for each answer of the backend probe.
type Take struct {
	NodeID string
	TTL    time.Duration
	Info   []byte // the master's ProcessInfo, as Acquire takes it
	Seen   int64  // the highest term seen, as Acquire takes it
	// Put is the registration as master, as AcquireRegister takes it; its
	// Mode is ignored: the script writes with Modes' choice.
	Put Put
	// Modes is the backend (Put.Mode) for each answer of the probe, in
	// the order of ProbeAnswers; "" where the registry has none, and no
	// attempt is made on that answer.
	Modes [4]string
}

// ProbeAnswers are the answers the registry backend probe can give, in the
// order of Take.Modes.
var ProbeAnswers = [4]struct{ Native, HPExpire bool }{{false, false}, {false, true}, {true, false}, {true, true}}

// Took is the outcome of a Take.
type Took struct {
	// Made is true when the script answered that it made the attempt;
	// Acquired, Stored and RegErr are then AcquireRegister's outcome
	// (Err is nil), unless Err is the attempt's own error.
	Made     bool
	Acquired Acquired
	Stored   Stored
	RegErr   error
	// Err is the call's error, when the reply was lost or had another
	// shape: whether the attempt was made is then unknown; or, with Made,
	// the attempt's own error.
	Err error
}

// AskTaking is Ask, and in the same script call Start's first attempt at
// the lock with its registration, t, when the answers allow it (takeSrc):
// one round trip for a process that becomes master at Start. It sends
// EVALSHA (EVAL when the server has not cached the script). An error in t
// is returned before anything is sent.
func AskTaking(ctx context.Context, c redis.Scripter, k keyspace.Keys, ownTurn, ownID string, t Take) (Asked, Took, error) {
	t.Put.Mode = TTLNative // replaced by the script's choice
	_, aargs, err := acquireRegisterCall(k, t.NodeID, t.TTL, t.Info, t.Seen, t.Put)
	if err != nil {
		return Asked{}, Took{}, err
	}
	for _, m := range t.Modes {
		if m != "" && !slices.Contains(ttlModes, m) {
			return Asked{}, Took{}, fmt.Errorf("ask: unknown TTL mode %q", m)
		}
	}
	args := askArgs(k, ownTurn, ownID)
	for _, m := range t.Modes {
		args = append(args, m)
	}
	args = append(args, aargs...)
	reply, err := takeScript.Run(ctx, c, askKeys(k), args...).Result()
	parts, attempt, err := answers(ctx, reply, err, true)
	took := Took{Err: err}
	if err == nil && attempt != nil {
		took.Made = true
		if v, aerr := attempt.Result(); aerr != nil {
			took.Err = scriptError("acquire register", aerr)
		} else {
			took.Acquired, took.Stored, took.RegErr, took.Err = parseAcquireRegister(k, v)
		}
	}
	return asked(ctx, k, parts), took, nil
}

// answers splits the reply of askSrc, or the error of its call, into one
// command per question, each with its own answer; an error of the call,
// or a reply of another shape, is every answer's. With taking, the reply
// is takeSrc's: attempt is the command of its sixth answer, nil when there
// is none (the attempt was not made, or the call failed). callErr is the
// call's error, or the reply's when it has another shape: the attempt may
// have been made then.
func answers(ctx context.Context, reply any, err error, taking bool) (parts [5]*redis.Cmd, attempt *redis.Cmd, callErr error) {
	arr, ok := reply.([]any)
	ok = ok && (len(arr) == len(parts) || taking && len(arr) == len(parts)+1)
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
	if err == nil && len(arr) > len(parts) {
		attempt = redis.NewCmd(ctx)
		setAnswer(attempt, arr[len(parts)], reply)
	}
	return parts, attempt, err
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
