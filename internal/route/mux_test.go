package route_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/herdkit/herd/internal/route"
)

// TestMux: handlers by type, the default one, removal, and the errors of a
// missing handler and of a panic (with the stack only when Stacks is set).
func TestMux(t *testing.T) {
	var got []string
	record := func(name string) func(context.Context, string) error {
		return func(_ context.Context, m string) error {
			got = append(got, name+":"+m)
			return nil
		}
	}
	var x route.Mux[string]
	if err := x.Handle("", record("a")); !errors.Is(err, route.ErrInvalidName) {
		t.Fatalf("empty type: %v", err)
	}
	if err := x.Handle("a", record("a")); err != nil {
		t.Fatal(err)
	}
	if err := x.Dispatch(context.Background(), "b", "1"); !errors.Is(err, route.ErrUnknownType) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("no handler: %v", err)
	}
	x.HandleDefault(record("default"))
	for _, typ := range []string{"a", "b"} {
		if err := x.Dispatch(context.Background(), typ, typ); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Handle("a", nil); err != nil {
		t.Fatal(err)
	}
	if err := x.Dispatch(context.Background(), "a", "a"); err != nil {
		t.Fatal(err)
	}
	if want := "[a:a default:b default:a]"; fmt.Sprint(got) != want {
		t.Errorf("handled %v, want %s", got, want)
	}

	for _, stacks := range []bool{false, true} {
		y := route.Mux[int]{Stacks: stacks}
		y.HandleDefault(func(context.Context, int) error { panic("boom") })
		err := y.Dispatch(context.Background(), "t", 1)
		if !errors.Is(err, route.ErrHandlerPanic) || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("panic: %v", err)
		}
		if has := strings.Contains(err.Error(), "goroutine"); has != stacks {
			t.Errorf("Stacks %v: the error has a stack: %v", stacks, has)
		}
	}
}
