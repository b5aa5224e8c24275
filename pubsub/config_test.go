package pubsub_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/pubsub"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		cfg    pubsub.Config
		errHas string // "" for valid
	}{
		{"zero value", pubsub.Config{}, ""},
		{"defaults", pubsub.DefaultConfig(), ""},
		{"custom", pubsub.Config{LockName: "cams", SlavePrefix: "cams:slave:", PingInterval: time.Second, MaxRetryDelay: 50 * time.Millisecond}, ""},
		{"glob in prefix", pubsub.Config{SlavePrefix: "worker:*:"}, "SlavePrefix \"worker:*:\" contains the glob character '*'"},
		{"blank lock name", pubsub.Config{LockName: "  "}, "LockName is empty"},
		{"ping too short", pubsub.Config{PingInterval: time.Millisecond}, "PingInterval (1ms) is below the minimum of 10ms"},
		{"retry below first delay", pubsub.Config{MaxRetryDelay: time.Millisecond}, "MaxRetryDelay (1ms) is below the first retry delay (10ms)"},
		{"negative retry", pubsub.Config{MaxRetryDelay: -time.Second}, "MaxRetryDelay (-1s) is negative"},
		{"negative op timeout", pubsub.Config{OpTimeout: -time.Second}, "OpTimeout (-1s) is negative"},
		{"negative backlog", pubsub.Config{MaxBacklog: -1}, "MaxBacklog (-1) is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.errHas == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.errHas)
			}
		})
	}
	if err := (pubsub.Config{SlavePrefix: "a b"}).Validate(); !errors.Is(err, pubsub.ErrInvalidName) {
		t.Errorf("bad prefix error %v does not match ErrInvalidName", err)
	}
}

func TestChannelNames(t *testing.T) {
	if got := pubsub.SlaveChannel("proc-1"); got != "worker:slave:proc-1" {
		t.Errorf("SlaveChannel = %q", got)
	}
	if got := (pubsub.Config{}).SlaveChannel("proc-1"); got != "worker:slave:proc-1" {
		t.Errorf("zero Config SlaveChannel = %q", got)
	}
	if got := (pubsub.Config{SlavePrefix: "cams:"}).SlaveChannel("proc-1"); got != "cams:proc-1" {
		t.Errorf("custom SlaveChannel = %q", got)
	}
	if got := (pubsub.Config{}).MasterInbox(); got != "master-election:master-inbox" {
		t.Errorf("MasterInbox = %q", got)
	}
	if got := (pubsub.Config{LockName: "cams", Cluster: true}).MasterInbox(); got != "{cams}:master-inbox" {
		t.Errorf("cluster MasterInbox = %q", got)
	}
}

func TestNoSubscribers(t *testing.T) {
	a, b := &pubsub.NoSubscriberError{SlaveID: "a"}, &pubsub.NoSubscriberError{SlaveID: "b"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"one", a, "a"},
		{"wrapped", errors.Join(errors.New("x"), errors.Join(a, b)), "a,b"},
		{"other", errors.New("x"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(pubsub.NoSubscribers(tt.err), ","); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if !errors.Is(a, pubsub.ErrNoSubscriber) || errors.Is(a, pubsub.ErrStaleTerm) {
		t.Error("NoSubscriberError matches the wrong sentinel")
	}
}
