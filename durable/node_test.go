package durable_test

const nodeEnv = "HERD_DURABLE_TEST_NODE"

func runNode() int { return 0 }
