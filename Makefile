# Onceflight. `make` with no target lists the targets.
GO      ?= go
BIN     ?= bin/onceflight
# A count, not a duration: with -fuzztime D, go1.26's fuzz coordinator can
# report "context deadline exceeded" at the deadline with no failing input
# (golang/go#75804, fixed in go1.27); a count has no deadline to race.
FUZZTIME ?= 100000x
# What `onceflight version` prints: a tag when the commit has one. The
# revision is passed too because builds without .git (a Docker context)
# get no VCS stamp from the toolchain.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -s -w -X github.com/onceflight/onceflight/cli.version=$(VERSION) -X github.com/onceflight/onceflight/cli.revision=$(REVISION)
IMAGE    ?= onceflight:$(VERSION)

.DEFAULT_GOAL := help
.PHONY: help build image test test-race actionlint lint upgrade-test fuzz bench bench-rate bench-e2e bench-scale chaos chaos-race sim mutants soak demo demo-console kafkajs clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/onceflight
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/onceflight

image: ## build the container image (Dockerfile); skipped with a message where Docker is not usable
	@if docker info >/dev/null 2>&1; then \
		docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE) -t onceflight:latest . ; \
	else \
		echo "make image: skipped: docker is not usable here ('docker info' failed); the Dockerfile needs Docker or a compatible builder"; \
	fi

test: ## the whole test suite (what CI runs), with short fuzz runs of the decoders
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 8m ./...
	$(GO) test ./schemas -run '^$$' -fuzz '^FuzzDecodeCommand$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./kafkaconf -run '^$$' -fuzz '^FuzzParseProperties$$' -fuzztime $(FUZZTIME)
	$(GO) test ./schemas -run '^$$' -fuzz '^FuzzDecodeRecordFast$$' -fuzztime $(FUZZTIME)
	$(GO) test ./schemas -run '^$$' -fuzz '^FuzzStructuredFastMatchesSDK$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jcs -run '^$$' -fuzz '^FuzzCanonicalV1MatchesReference$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jcs -run '^$$' -fuzz '^FuzzJCSMatchesLibrary$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/wire -run '^$$' -fuzz '^FuzzSealRecordHash$$' -fuzztime $(FUZZTIME)

test-race: ## the test suite under the race detector
	$(GO) test -race -count=1 -timeout 15m ./...

actionlint: ## check the GitHub workflows (.github/workflows) with actionlint
	$(GO) run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12

lint: ## gofmt, go vet, staticcheck
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

fuzz: ## fuzz every target in the module, one after the other (FUZZ=2m each by default, or a count such as 1000000x; FUZZONLY=regexp picks targets)
	GO=$(GO) scripts/fuzz.sh $(or $(FUZZ),$(LONGFUZZ),2m) '$(or $(FUZZONLY),.)'

bench: ## benchmarks (compare runs with benchstat)
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./schemas ./internal/dedupe ./partitioner | tee bench.txt

bench-rate: ## a system's rate limit (rate: 50) over a drain of 1 000 commands, about 20 s
	$(GO) test ./consumer -run '^$$' -bench '^BenchmarkSystemRate$$' -benchtime 1x -count 1

bench-e2e: build ## end-to-end benchmark: raw Kafka+Pebble pipeline vs. serve, one table (BENCH_ARGS='-n 5000' for a quick run)
	$(GO) build -o bin/onceflight-bench ./cmd/onceflight-bench
	./bin/onceflight-bench -bin $(BIN) $(BENCH_ARGS)

bench-scale: build ## scale facts, minutes long: a dedupe index of SCALE_KEYS keys (default 10 000 000: RSS, disk/key, lookup p50/p99, build rate), then 1, 2 and 3 executors sharing 12 partitions
	ONCEFLIGHT_BENCH_SCALE=1 SCALE_KEYS=$(or $(SCALE_KEYS),10000000) $(GO) test ./internal/dedupe -run '^$$' -bench '^BenchmarkIndexScale$$' -benchtime 1x -count 1 -timeout 90m -v
	$(GO) build -o bin/onceflight-bench ./cmd/onceflight-bench
	./bin/onceflight-bench -bin $(BIN) -phases executors -max-executors 3 -n $(or $(SCALE_N),50000) $(BENCH_ARGS)

# Without ONCEFLIGHT_CHAOS (so in `make test`) the short ones still run:
# TestChaosQuick (kill -9) and TestSigstopPastSession (SIGSTOP past a 6 s session).
chaos: ## failure tests on the built binary (kill -9, SIGSTOP, restarts), long
	ONCEFLIGHT_CHAOS=1 $(GO) test -count=1 -timeout 30m -v ./internal/e2e/

chaos-race: ## the chaos tests with the executor processes built with -race
	ONCEFLIGHT_CHAOS=1 ONCEFLIGHT_E2E_RACE=1 $(GO) test -count=1 -timeout 40m -v ./internal/e2e/

sim: ## the simulation: SEEDS=50 seeded histories (commands, connector faults, operator decisions and forged ones, reconciles, restarts, rebalances, takeovers) against real executors, checked against a model of G1-G5; SEED=n replays one, STEPS=1,4,9 only those of its steps
	ONCEFLIGHT_SIM_SEEDS=$(or $(SEEDS),50) ONCEFLIGHT_SIM_SEED=$(SEED) ONCEFLIGHT_SIM_STEPS=$(STEPS) $(GO) test -count=1 -timeout 0 -v -run 'TestSeededHistories' ./consumer/

# Not in test: each mutant rebuilds and runs its tests (about an hour for all
# of them on 2 cores). The tree is copied to a temporary directory first.
mutants: ## remove each guarantee (and each decision-table row) on purpose, one at a time, on a copy of the tree, and list the tests that catch it; MUTANTS=regexp picks some, MUTANTS_ARGS=-full runs every test of their packages
	$(GO) run ./scripts/mutants -only '$(MUTANTS)' $(MUTANTS_ARGS)

soak: ## mixed load on three executors with a fault every few minutes and one broker restart for DURATION (or SOAK_DURATION, default 10m), then audit and a leak check (not in test)
	ONCEFLIGHT_SOAK=1 SOAK_DURATION=$(or $(DURATION),$(SOAK_DURATION),10m) $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./consumer

# The releases an in-place upgrade starts from, one run each: the last
# commit of round 1 (2026-11-30; its topics have 1 MiB max.message.bytes
# and a 7-day journal, which `topics apply` must raise on the live cluster)
# and of round 2 (2026-12-01). UPGRADE_FROM=<rev> names others.
UPGRADE_FROM ?= d30b609 ffc9246
upgrade-test: ## upgrade in place from each of UPGRADE_FROM (git revisions, built here) with executions in flight; checked from the records (not in test)
	@set -e; for rev in $(UPGRADE_FROM); do \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git archive --format=tar $$rev | tar -x -C "$$tmp"; \
	echo "building the release at $$rev"; \
	(cd "$$tmp" && $(GO) build -ldflags "-X main.version=$$rev -X github.com/onceflight/onceflight/cli.version=$$rev" -o "$$tmp/onceflight-old" ./cmd/onceflight); \
	ONCEFLIGHT_E2E_OLD_BIN="$$tmp/onceflight-old" $(GO) test -count=1 -timeout 20m -v -run '^TestUpgradeInPlace$$' ./internal/e2e/; \
	rm -rf "$$tmp"; \
	done

demo: build ## run the demo: embedded broker, executor, demo service, a table of outcomes
	./$(BIN) demo

demo-console: build ## the demo, then keep it running with the operator console on http://127.0.0.1:8090/
	./$(BIN) demo --console 127.0.0.1:8090

kafkajs: build ## prove a kafkajs client can produce commands and read outcomes (needs npm)
	./scripts/kafkajs-check.sh ./$(BIN)

clean:
	rm -rf bin bench.txt
