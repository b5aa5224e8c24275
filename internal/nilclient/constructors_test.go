package nilclient_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

type leader struct{}

func (leader) IsMaster() bool { return true }
func (leader) Term() int64    { return 1 }
func (leader) NodeID() string { return "n" }

// TestConstructorsRefuseTypedNil: every constructor that takes a client
// refuses a typed nil with the error it gives for nil. Before, New panicked
// and the pubsub and durable constructors accepted it.
func TestConstructorsRefuseTypedNil(t *testing.T) {
	keys := keyspace.NewKeys("cams", false)
	ctors := []struct {
		name string
		call func(redis.UniversalClient) error
	}{
		{"masterelection.New", func(c redis.UniversalClient) error {
			_, err := masterelection.New(c, masterelection.DefaultConfig())
			return err
		}},
		{"pubsub.NewSubscriber", func(c redis.UniversalClient) error {
			_, err := pubsub.NewSubscriber(c, "s", pubsub.Config{})
			return err
		}},
		{"pubsub.NewRouter", func(c redis.UniversalClient) error {
			_, err := pubsub.NewRouter(c, leader{}, nil, pubsub.Config{})
			return err
		}},
		{"pubsub.NewReports", func(c redis.UniversalClient) error {
			_, err := pubsub.NewReports(c, nil, pubsub.Config{})
			return err
		}},
		{"durable.NewRouter", func(c redis.UniversalClient) error {
			_, err := durable.NewRouter(c, leader{}, nil, durable.Config{})
			return err
		}},
		{"durable.NewConsumer", func(c redis.UniversalClient) error {
			_, err := durable.NewConsumer(c, "s", durable.Config{})
			return err
		}},
		{"durable.NewDeadLetters", func(c redis.UniversalClient) error {
			_, err := durable.NewDeadLetters(c, durable.Config{})
			return err
		}},
		{"registry.New", func(c redis.UniversalClient) error {
			_, err := registry.New(context.Background(), c, keys, registry.Config{})
			return err
		}},
	}
	typed := []struct {
		name   string
		client redis.UniversalClient
	}{
		{"*redis.Client", (*redis.Client)(nil)},
		{"*redis.ClusterClient", (*redis.ClusterClient)(nil)},
		{"*redis.Ring", (*redis.Ring)(nil)},
	}
	for _, ctor := range ctors {
		want := ctor.call(nil)
		if want == nil {
			t.Fatalf("%s(nil) accepted", ctor.name)
		}
		for _, tn := range typed {
			t.Run(ctor.name+"/"+tn.name, func(t *testing.T) {
				var err error
				func() {
					defer func() {
						if p := recover(); p != nil {
							err = errors.New("panic")
							t.Errorf("%s(typed nil %s) panicked: %v", ctor.name, tn.name, p)
						}
					}()
					err = ctor.call(tn.client)
				}()
				if err == nil || err.Error() != want.Error() {
					t.Fatalf("%s(typed nil %s) = %v, want %q", ctor.name, tn.name, err, want)
				}
				if errors.Is(want, masterelection.ErrNilClient) && !errors.Is(err, masterelection.ErrNilClient) {
					t.Fatalf("error %v does not wrap ErrNilClient", err)
				}
			})
		}
	}
}
