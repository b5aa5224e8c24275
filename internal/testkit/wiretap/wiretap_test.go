package wiretap_test

import (
	"context"
	"slices"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/wiretap"
)

// everything records every command the hooks see, handshakes included.
type everything struct{ names []string }

func (e *everything) DialHook(next redis.DialHook) redis.DialHook { return next }
func (e *everything) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		e.names = append(e.names, cmd.Name())
		return next(ctx, cmd)
	}
}
func (e *everything) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			e.names = append(e.names, c.Name())
		}
		return next(ctx, cmds)
	}
}

// TestHandshakesLeftOut: a client's first call dials, and go-redis runs the
// new connection's handshake through the hooks (the plain recorder sees it);
// the Tap records the calls alone, whatever connections the pool opened.
func TestHandshakesLeftOut(t *testing.T) {
	m := miniredis.RunT(t)
	ctx := context.Background()
	for _, name := range []string{"", "named"} { // a name adds CLIENT SETNAME to the handshake
		t.Run("client name "+name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), ClientName: name, PoolSize: 1})
			defer c.Close()
			all := &everything{}
			tap := &wiretap.Tap{}
			c.AddHook(all)
			c.AddHook(tap)
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			mark := tap.Trips()
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "k", "v", 0)
				p.Get(ctx, "k")
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(all.names, "hello") {
				t.Fatalf("the plain hook saw no handshake (%v): the test shows nothing", all.names)
			}
			if got, want := tap.Since(0), []string{"ping", "set+get"}; !slices.Equal(got, want) {
				t.Errorf("recorded %v, want %v (everything the hooks saw: %v)", got, want, all.names)
			}
			if got := tap.Since(mark); !slices.Equal(got, []string{"set+get"}) {
				t.Errorf("since the mark: %v", got)
			}
			if tap.Trips() != 2 || tap.Commands() != 3 {
				t.Errorf("%d round trips of %d commands, want 2 of 3", tap.Trips(), tap.Commands())
			}
			if got := tap.Take(); len(got) != 2 || tap.Trips() != 0 || tap.Commands() != 0 {
				t.Errorf("Take returned %v and left %d trips, %d commands", got, tap.Trips(), tap.Commands())
			}
		})
	}
}

// TestName: a Tap names commands as told, an EVALSHA by its script.
func TestName(t *testing.T) {
	m := miniredis.RunT(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	tap := &wiretap.Tap{Name: func(cmd redis.Cmder) string {
		if cmd.Name() == "evalsha" {
			return "return-1"
		}
		return cmd.Name()
	}}
	c.AddHook(tap)
	s := redis.NewScript("return 1")
	if err := s.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, c, nil).Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := tap.Take(), []string{"script", "return-1"}; !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
}
