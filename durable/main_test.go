package durable_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(nodeEnv) != "" {
		os.Exit(runNode())
	}
	if os.Getenv(burstEnv) != "" {
		os.Exit(runBurst())
	}
	goleak.VerifyTestMain(m)
}
