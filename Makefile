# herd development tasks. `make test` is what CI runs (through .ci/run).

GO        ?= go
PKGS      ?= ./...
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all test lint fmt-check vet demo bench bench-peers soak soak-summary test-topologies

all: test

## test: gofmt check, go vet, then every test with the race detector.
test: fmt-check vet
	$(GO) test $(TEST_FLAGS) $(PKGS)

## lint: gofmt must report nothing, and go vet must pass.
lint: fmt-check vet

fmt-check:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w):"; \
		echo "$$out"; \
		exit 1; \
	fi

vet:
	$(GO) vet $(PKGS)

## demo: run the cluster example.
demo:
	$(GO) run ./examples/cluster

## bench: measure herd against the PING round trip of a redis-server it starts
## itself (REDIS_ADDR=host:port to use another; HERD_REDIS_SERVERS adds servers
## for the registry backends), print one table and write it to
## docs/performance.md. The Go benchmarks alone, for benchstat:
##   go test -run '^$' -bench . -benchmem -count 10 ./cmd/herdbench/internal/bench
bench:
	$(GO) run ./cmd/herdbench -out docs/performance.md

## bench-peers: herd against what a user would pick instead, in one run:
## etcd's concurrency.Election on an embedded etcd, leader loops on
## bsm/redislock and go-redsync/redsync, and the specification's polling,
## and a durable Router.Send against hibiken/asynq's enqueue (rows 5a-5p;
## 5n-5p count Redis's instructions under valgrind, skipped without it),
## on a redis-server it starts itself (REDIS_SERVER=/path/to/redis-server
## for another). A module of its own (bench/peers, built on demand), so
## herd's go.mod does not depend on the peers; it measures the working
## tree. Writes its table into docs/performance.md ("Against its peers");
## a few minutes. A quick check of the program: make bench-peers PEERS_FLAGS=-quick
REDIS_SERVER ?= redis-server
PEERS_FLAGS  ?=
bench-peers:
	cd bench/peers && $(GO) run . -redis-server $(REDIS_SERVER) $(PEERS_FLAGS)

## soak: the fault-injection soak (integration/internal/faults): SOAK_SCHEDULES random
## schedules of SOAK_FAULTS faults each (about 20 s per schedule; some faults
## overlap, and the composite handover-loss is one of the kinds) on three node
## processes, rotating over the server matrix (HERD_REDIS_SERVERS adds
## servers), one progress line per schedule. Each schedule is appended to the
## ledger SOAK_LEDGER as it ends, so soaks add up and an interrupted one keeps
## what it played; at the end the summary of the whole ledger (running total
## and this run) is printed, written into docs/testing.md between its
## soak-ledger markers, and to SOAK_OUT when set. Fewer: make soak
## SOAK_SCHEDULES=50. A failed schedule prints its seed and timeline and is
## written to integration/failures/; replay it with
## HERD_FAULTS_SEED=<seed> go test -run TestFaults ./integration/internal/faults/
## (a tour) or make soak SOAK_SCHEDULES=1 HERD_FAULTS_SEED=<seed>.
## soak-summary: the summary again, from the ledger alone.
SOAK_SCHEDULES ?= 1000
SOAK_FAULTS    ?= 6
SOAK_OUT       ?=
SOAK_LEDGER    ?= integration/internal/faults/ledger/soak.jsonl
SOAK_DOC       ?= docs/testing.md
SOAK_ENV = HERD_SOAK_LEDGER=$(abspath $(SOAK_LEDGER)) HERD_SOAK_DOC=$(abspath $(SOAK_DOC)) HERD_SOAK_OUT=$(abspath $(SOAK_OUT))
soak:
	mkdir -p $(dir $(SOAK_LEDGER))
	cd integration/internal/faults && $(SOAK_ENV) HERD_SOAK_SCHEDULES=$(SOAK_SCHEDULES) HERD_SOAK_FAULTS=$(SOAK_FAULTS) \
		$(GO) test -count=1 -timeout 0 -run '^TestSoak$$'

soak-summary:
	cd integration/internal/faults && $(SOAK_ENV) HERD_SOAK_SUMMARY=1 $(GO) test -count=1 -run '^TestSoakSummary$$'

## test-topologies: herd on Redis Cluster and Sentinel deployments that the
## tests build from the server binaries (build tag topologies; a few minutes).
## Packages run one at a time (-p 1): failovers are timed by the servers.
TOPOLOGY_PKGS ?= ./integration/topologies/ ./internal/testkit/redistest/ ./cmd/herd/internal/operate/
test-topologies:
	$(GO) vet -tags topologies $(TOPOLOGY_PKGS)
	$(GO) test -race -count=1 -p 1 -timeout 30m -tags topologies $(TOPOLOGY_PKGS)
