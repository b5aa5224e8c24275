package redistest

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestHasCommand(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		inst := Start(t, s)
		c := inst.Client(t)
		ctx := ctxT(t)

		// Whether HSETEX exists, asked the server's own command table.
		info, err := c.Do(ctx, "COMMAND", "INFO", "HSETEX").Slice()
		if err != nil {
			t.Fatal(err)
		}
		hsetex := len(info) == 1 && info[0] != nil

		tests := []struct {
			name string
			args []any
			want bool
		}{
			{"ping", []any{"PING"}, true},
			{"nil reply counts", []any{"GET", "probe:missing"}, true},
			{"unknown command", []any{"NO-SUCH-COMMAND"}, false},
			{"wrong arity", []any{"GET"}, false},
			{"hsetex", []any{"HSETEX", "probe:hsetex", "PX", 60000, "FIELDS", 1, "f", "v"}, hsetex},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := HasCommand(ctx, c, tt.args...); got != tt.want {
					t.Fatalf("HasCommand(%v) = %v, want %v", tt.args, got, tt.want)
				}
				ok, err := Supports(ctx, c, tt.args...)
				if ok != tt.want || err != nil {
					t.Fatalf("Supports(%v) = %v, %v; want %v, nil", tt.args, ok, err, tt.want)
				}
			})
		}
		t.Logf("%s: HSETEX supported: %v", s.Name, hsetex)
	})
}

func TestSupportsIOError(t *testing.T) {
	inst := Start(t, Default(t))
	c := inst.Client(t)
	inst.Kill(t)
	ok, err := Supports(shortCtx(t), c, "PING")
	if ok || err == nil {
		t.Fatalf("Supports on a dead server = %v, %v; want false and an error", ok, err)
	}
	if HasCommand(shortCtx(t), c, "PING") {
		t.Fatal("HasCommand on a dead server = true")
	}
	if ok, err := Supports(ctxT(t), c); ok || err == nil {
		t.Fatalf("Supports with no command = %v, %v; want an error", ok, err)
	}
}

func TestMiniredis(t *testing.T) {
	m, c := Miniredis(t)
	ctx := ctxT(t)
	if !c.Options().ContextTimeoutEnabled {
		t.Fatal("client without ContextTimeoutEnabled")
	}
	if err := c.Set(ctx, "k", "v", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v", got, err)
	}
	m.FastForward(2 * time.Second)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after its TTL: %v, want redis.Nil", err)
	}
}
