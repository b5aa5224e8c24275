package scripts_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
)

func TestInboxKeys(t *testing.T) {
	if got := scripts.NewKeys("svc", false).Inbox("p1"); got != "svc:inbox:p1" {
		t.Errorf("Inbox = %q", got)
	}
	k := scripts.NewKeys("svc", true)
	if got := k.Inbox("p1"); got != "{svc}:inbox:p1" {
		t.Errorf("cluster Inbox = %q", got)
	}
	if got := k.InboxPattern(); got != "{svc}:inbox:*" {
		t.Errorf("InboxPattern = %q", got)
	}
}

// TestInboxSendContract: entries are added only under the holder's term,
// with the term and envelope fields, up to the cap per inbox.
func TestInboxSendContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := scripts.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	in1, in2 := k.Inbox("s1"), k.Inbox("s2")
	msgs := []scripts.Queued{{Inbox: in1, Message: []byte("a")}, {Inbox: in2, Message: []byte("b")}, {Inbox: in1, Message: []byte("c")}, {Inbox: in1, Message: []byte("d")}}
	ids, err := scripts.InboxSend(ctx, c, k, "m", a.Term, 2, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 4 || ids[0] == "" || ids[1] == "" || ids[2] == "" || ids[3] != "" {
		t.Fatalf("ids %q; want three entries and the fourth refused (cap 2)", ids)
	}
	es, err := c.XRange(ctx, in1, "-", "+").Result()
	if err != nil || len(es) != 2 || es[0].ID != ids[0] || es[1].Values["m"] != "c" || es[0].Values["t"] != strTerm(a.Term) {
		t.Fatalf("inbox 1: %+v, %v", es, err)
	}
	for _, tc := range []struct {
		name, node string
		term       int64
	}{{"other node", "x", a.Term}, {"old term", "m", a.Term - 1}, {"no term", "m", 0}} {
		_, err := scripts.InboxSend(ctx, c, k, tc.node, tc.term, 0, msgs[:1])
		if !errors.Is(err, scripts.ErrFenced) {
			t.Errorf("%s: %v; want ErrFenced", tc.name, err)
		}
	}
	if n := c.XLen(ctx, in1).Val(); n != 2 {
		t.Errorf("inbox 1 holds %d entries after the fenced sends; want 2", n)
	}
	if ids, err := scripts.InboxSend(ctx, c, k, "m", a.Term, 0, nil); ids != nil || err != nil {
		t.Errorf("empty batch: %v, %v", ids, err)
	}
	if _, err := scripts.InboxSend(ctx, c, k, "m", a.Term, -1, msgs); err == nil {
		t.Error("negative maxLen accepted")
	}
}

// TestInboxMoveContract: a move keeps the envelope, stamps the mover's term,
// adds the deliveries, skips entries gone, drops garbage, deletes the
// emptied inbox, and is refused to anyone but the holder under its term.
func TestInboxMoveContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := scripts.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	from, to := k.Inbox("dead"), k.Inbox("live")
	ids, err := scripts.InboxSend(ctx, c, k, "m", a.Term, 0, []scripts.Queued{{Inbox: from, Message: []byte("x")}, {Inbox: from, Message: []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	garbage := c.XAdd(ctx, &redis.XAddArgs{Stream: from, Values: []string{"other", "1"}}).Val()
	if err := c.XGroupCreateMkStream(ctx, from, scripts.InboxGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	// The dead consumer read the first entry twice (a restart).
	for range 2 {
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: scripts.InboxGroup, Consumer: "dead", Streams: []string{from, "0"}, Count: 1}).Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		_ = c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: scripts.InboxGroup, Consumer: "dead", Streams: []string{from, ">"}, Count: 1}).Err()
	}
	moves := []scripts.Move{{EntryID: ids[0], To: to}, {EntryID: ids[1], To: to}, {EntryID: garbage, To: to}, {EntryID: "1-1", To: to}}
	if _, err := scripts.InboxMove(ctx, c, k, "m", a.Term-1, scripts.InboxGroup, from, moves); !errors.Is(err, scripts.ErrFenced) {
		t.Fatalf("move under an old term: %v; want ErrFenced", err)
	}
	if n := c.XLen(ctx, from).Val(); n != 3 {
		t.Fatalf("after a fenced move the old inbox holds %d entries; want 3", n)
	}
	b, err := scripts.Acquire(ctx, c, k, "m2", time.Minute, nil, 0)
	if err == nil && b.Term != 0 {
		t.Fatalf("lock taken twice: %+v", b)
	}
	got, err := scripts.InboxMove(ctx, c, k, "m", a.Term, scripts.InboxGroup, from, moves)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0] == "" || got[1] == "" || got[2] != scripts.MovedDropped || got[3] != scripts.MovedGone {
		t.Fatalf("move results %q", got)
	}
	es, err := c.XRange(ctx, to, "-", "+").Result()
	if err != nil || len(es) != 2 {
		t.Fatalf("new inbox %+v, %v", es, err)
	}
	if es[0].Values["m"] != "x" || es[0].Values["t"] != strTerm(a.Term) || es[0].Values["d"] != "2" || es[1].Values["m"] != "y" || es[1].Values["d"] != "1" {
		t.Errorf("moved entries %+v", es)
	}
	if n := c.Exists(ctx, from).Val(); n != 0 {
		t.Errorf("the emptied inbox still exists")
	}
	if _, err := scripts.InboxMove(ctx, c, k, "m", a.Term, scripts.InboxGroup, from, []scripts.Move{{EntryID: "nope", To: to}}); err == nil || !strings.Contains(err.Error(), "not a stream entry id") {
		t.Errorf("bad id: %v", err)
	}
	if _, err := scripts.InboxMove(ctx, c, k, "m", a.Term, scripts.InboxGroup, from, []scripts.Move{{EntryID: "1-0", To: from}}); err == nil {
		t.Error("a move into the same inbox was accepted")
	}
}

func strTerm(t int64) string { return strconv.FormatInt(t, 10) }

// commandNames records the name of every command a client sends.
type commandNames struct{ names []string }

func (h *commandNames) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *commandNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.names = append(h.names, cmd.Name())
		return next(ctx, cmd)
	}
}
func (h *commandNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLoadCachesTheInboxScripts: after Load, the inbox scripts run with
// EVALSHA alone (no NOSCRIPT round trip and EVAL).
func TestLoadCachesTheInboxScripts(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := scripts.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := scripts.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	h := &commandNames{}
	c.AddHook(h)
	ids, err := scripts.InboxSend(ctx, c, k, "m", a.Term, 0, []scripts.Queued{{Inbox: k.Inbox("a"), Message: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scripts.InboxMove(ctx, c, k, "m", a.Term, scripts.InboxGroup, k.Inbox("a"), []scripts.Move{{EntryID: ids[0], To: k.Inbox("b")}}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(h.names, " ") != "evalsha evalsha" {
		t.Errorf("commands %q; want two EVALSHA", h.names)
	}
}
