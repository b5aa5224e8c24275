package masterelection

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/testsync"
	"github.com/herdkit/herd/keyspace"
)

func TestParseMemoryPolicy(t *testing.T) {
	tests := []struct {
		name    string
		info    string
		want    memoryPolicy
		wantErr bool
	}{
		{
			name: "redis",
			info: "# Memory\r\nused_memory:1024\r\nmaxmemory:2097152\r\nmaxmemory_human:2.00M\r\nmaxmemory_policy:volatile-lru\r\nmem_fragmentation_ratio:1.5\r\n",
			want: memoryPolicy{policy: "volatile-lru", maxmemory: 2 << 20},
		},
		{
			name: "no limit, no trailing line end",
			info: "# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction",
			want: memoryPolicy{policy: "noeviction"},
		},
		{name: "no policy", info: "# Memory\r\nmaxmemory:0\r\n", wantErr: true},
		{name: "no maxmemory", info: "# Memory\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\n", wantErr: true},
		{name: "empty policy", info: "maxmemory:0\r\nmaxmemory_policy:\r\n", wantErr: true},
		{name: "maxmemory not a number", info: "maxmemory:lots\r\nmaxmemory_policy:noeviction\r\n", wantErr: true},
		{name: "not INFO at all", info: "OK", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMemoryPolicy(tt.info)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestEvictionRisk(t *testing.T) {
	k := keyspace.NewKeys("lk", false)
	lock := []string{k.Master, k.Heartbeat, k.MasterProcess}
	all := append(append([]string(nil), lock...), k.Term, k.Processes)
	tests := []struct {
		name     string
		policy   string
		emulated bool
		keys     []string
		says     []string // in the effect
	}{
		{"volatile", "volatile-lru", false, lock, []string{"keys with a TTL", "lk:master of a healthy master", "Terms still grow: lk:term has no TTL"}},
		{"volatile ttl", "volatile-ttl", true, lock, []string{"keys with a TTL"}},
		{"allkeys", "allkeys-lfu", false, all, []string{"any key", "term key lk:term", "ErrDataLoss", "registry lk:processes"}},
		{"allkeys emulated", "allkeys-random", true, append(all, k.ProcessesExpiry), []string{"lk:processes:expiry"}},
		{"unknown", "some-future-policy", false, all, []string{"does not know this policy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, effect := evictionRisk(tt.policy, k, tt.emulated)
			if strings.Join(keys, " ") != strings.Join(tt.keys, " ") {
				t.Errorf("keys %v, want %v", keys, tt.keys)
			}
			for _, s := range tt.says {
				if !strings.Contains(effect, s) {
					t.Errorf("effect %q does not say %q", effect, s)
				}
			}
		})
	}
}

// infoHook answers INFO memory in place of the server (miniredis has no
// memory section): with reply, or, when block is set, not before the
// call's ctx ends. A pipeline with INFO in it (Start's first round trip)
// gets the other replies from the server; with block, none comes, as on
// a connection where one reply never comes.
type infoHook struct {
	reply string
	block bool
}

func (h infoHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h infoHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ask := isAsk(cmd)
		if cmd.Name() != "info" && !ask {
			return next(ctx, cmd)
		}
		if h.block {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		if !ask {
			cmd.(*redis.StringCmd).SetVal(h.reply)
			return nil
		}
		// Start's questions (rdb.Ask, rdb.AskTaking): the third answer is
		// INFO memory's.
		err := next(ctx, cmd)
		if answers, ok := cmd.(*redis.Cmd).Val().([]any); ok && len(answers) >= 5 {
			answers[2] = []any{int64(1), h.reply}
		}
		return err
	}
}

// isAsk tells whether cmd is the call of Start's questions, alone
// (rdb.Ask) or with its first attempt at the lock (rdb.AskTaking).
func isAsk(cmd redis.Cmder) bool {
	sha := scriptOf(cmd)
	return sha == rdb.AskSHA || sha == rdb.TakeSHA
}

// scriptOf is the digest of the script cmd runs, EVALSHA's or EVAL's;
// "" for another command.
func scriptOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	switch cmd.Name() {
	case "evalsha":
		return s
	case "eval":
		sum := sha1.Sum([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	return ""
}

func (h infoHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func memoryInfo(policy, maxmemory string) string {
	return "# Memory\r\nused_memory:1000000\r\nmaxmemory:" + maxmemory + "\r\nmaxmemory_policy:" + policy + "\r\n"
}

// TestEvictionCheckAtStart runs Start against each answer a server can give
// to INFO memory: Start always succeeds, only a policy that can evict under
// a limit is an error event, and each other answer is one log line.
func TestEvictionCheckAtStart(t *testing.T) {
	tests := []struct {
		name      string
		hook      *infoHook // nil: miniredis answers, and it refuses the memory section
		event     []string  // the error event says all of these; nil: no such event
		logMsg    string
		logLevel  string
		logFields map[string]any
		logError  string // the log line's error field contains it
	}{
		{
			name:      "volatile policy with a limit",
			hook:      &infoHook{reply: memoryInfo("volatile-lru", "2097152")},
			event:     []string{"maxmemory-policy volatile-lru with maxmemory 2097152 bytes", "test:master", "noeviction"},
			logMsg:    "redis may evict the election's keys",
			logLevel:  "warn",
			logFields: map[string]any{"policy": "volatile-lru", "maxmemory": 2097152.0},
		},
		{
			name:     "allkeys policy with a limit",
			hook:     &infoHook{reply: memoryInfo("allkeys-lru", "1073741824")},
			event:    []string{"maxmemory-policy allkeys-lru with maxmemory 1073741824 bytes", "term key test:term", "ErrDataLoss"},
			logMsg:   "redis may evict the election's keys",
			logLevel: "warn",
		},
		{
			name:      "noeviction",
			hook:      &infoHook{reply: memoryInfo("noeviction", "2097152")},
			logMsg:    "maxmemory-policy noeviction",
			logLevel:  "debug",
			logFields: map[string]any{"maxmemory": 2097152.0},
		},
		{
			name:     "policy without a limit",
			hook:     &infoHook{reply: memoryInfo("allkeys-lru", "0")},
			logMsg:   "safe while maxmemory stays 0",
			logLevel: "info",
		},
		{
			name:     "refused",
			logMsg:   "maxmemory-policy not checked",
			logLevel: "info",
			logError: "section (memory) is not supported", // miniredis, in a script too
		},
		{
			name:     "unanswered",
			hook:     &infoHook{block: true},
			logMsg:   "maxmemory-policy not checked",
			logLevel: "warn",
			logError: "INFO memory: context deadline exceeded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			logs := &testsync.Buffer{}
			cfg := testConfig("a")
			cfg.HeartbeatInterval = 200 * time.Millisecond // the bound of the calls after Start's
			cfg.Logger = zerolog.New(logs)
			c := w.client()
			if tt.hook != nil {
				c.AddHook(*tt.hook)
			}
			m, err := newElection(c, cfg, clock.NewFake(w.redisClock.Now()))
			if err != nil {
				t.Fatal(err)
			}
			rec := record(m)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = m.Stop(ctx)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			began := time.Now()
			if err := m.Start(ctx); err != nil {
				t.Fatalf("start: %v", err)
			}
			if took := time.Since(began); took > cfg.LockTTL+time.Second {
				t.Errorf("Start took %v: the check must not hold it beyond its bound (LockTTL %v, startTimeout)", took, cfg.LockTTL)
			}
			// Events arrive in emission order, and the check's comes before
			// the election's: once completed is in, it is in too.
			rec.waitEvents(t, "started", "acquired", "completed:master")
			var found []error
			for _, err := range rec.errors() {
				if errors.Is(err, ErrEvictionPolicy) {
					found = append(found, err)
				}
			}
			switch {
			case tt.event == nil && len(found) > 0:
				t.Fatalf("error events %v, want none wrapping ErrEvictionPolicy", found)
			case tt.event != nil && len(found) != 1:
				t.Fatalf("error events wrapping ErrEvictionPolicy: %v, want one", found)
			case tt.event != nil:
				for _, s := range tt.event {
					if !strings.Contains(found[0].Error(), s) {
						t.Errorf("error event %q does not say %q", found[0], s)
					}
				}
				if err := m.lastError(); err != nil {
					t.Errorf("Start's last error is %v: the check's report is no failed attempt", err)
				}
			}
			lines := logs.LogLines(t, tt.logMsg)
			if len(lines) != 1 {
				t.Fatalf("%d log lines saying %q, want 1; log:\n%s", len(lines), tt.logMsg, logs.String())
			}
			if got := lines[0]["level"]; got != tt.logLevel {
				t.Errorf("log level %v, want %s: %v", got, tt.logLevel, lines[0])
			}
			for k, v := range tt.logFields {
				if got := lines[0][k]; got != v {
					t.Errorf("log field %s = %v, want %v", k, got, v)
				}
			}
			if got, _ := lines[0]["error"].(string); !strings.Contains(got, tt.logError) {
				t.Errorf("log field error = %q, want it to say %q", got, tt.logError)
			}
		})
	}
}

// TestStopDuringStart: Stop while Start waits for its first round trip (its
// questions, with INFO memory, get no reply) or for the registry (Redis
// refuses every command, and the probe is retried) ends Start at once with
// an error wrapping context.Canceled, and Stop returns.
func TestStopDuringStart(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(w *world, c *redis.Client)
	}{
		{"first round trip unanswered", func(_ *world, c *redis.Client) { c.AddHook(infoHook{block: true}) }},
		{"registry retrying", func(w *world, _ *redis.Client) { w.mr.SetError("LOADING simulated outage") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			// HeartbeatInterval (LockTTL/3), the first round trip's bound, is
			// longer than the test.
			cfg := Config{LockName: "test", NodeID: "a", LockTTL: 3 * time.Minute}
			c := w.client()
			tt.setup(w, c)
			m, err := newElection(c, cfg, clock.NewFake(w.redisClock.Now()))
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan error, 1)
			go func() { started <- m.Start(context.Background()) }()
			time.Sleep(100 * time.Millisecond) // Start is waiting
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.Stop(ctx); err != nil {
				t.Errorf("Stop during Start = %v", err)
			}
			select {
			case err := <-started:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Start stopped = %v, want an error wrapping context.Canceled", err)
				}
			case <-ctx.Done():
				t.Fatal("Start did not return after Stop")
			}
			if m.IsMaster() {
				t.Error("master after Stop during Start")
			}
		})
	}
}
