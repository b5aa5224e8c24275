# herd development tasks. `make test` is what CI runs (through .ci/run).

GO        ?= go
PKGS      ?= ./...
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all test lint fmt-check vet demo bench soak test-topologies

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
##   go test -run '^$' -bench . -benchmem -count 10 ./bench
bench:
	$(GO) run ./bench/cmd/herdbench -out docs/performance.md

## soak: run the long-running soak tests, if any exist yet.
soak:
	@if grep -rqs --exclude-dir=.git --include='*_test.go' '^func TestSoak' .; then \
		$(GO) test -race -count=1 -timeout 60m -run '^TestSoak' $(PKGS); \
	else \
		echo "soak: no soak tests yet; the soak suite is tracked in the performance issue."; \
	fi

## test-topologies: placeholder for tests against Sentinel and Cluster topologies.
test-topologies:
	@echo "test-topologies: not implemented yet; topology tests (Sentinel, Cluster) are still to be written."
