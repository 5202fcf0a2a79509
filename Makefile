# Onceflight. `make` with no target lists the targets.
GO      ?= go
BIN     ?= bin/onceflight
# A count, not a duration: with -fuzztime D, go1.26's fuzz coordinator can
# report "context deadline exceeded" at the deadline with no failing input
# (golang/go#75804, fixed in go1.27); a count has no deadline to race.
FUZZTIME ?= 100000x

.DEFAULT_GOAL := help
.PHONY: help build test test-race lint fuzz bench chaos chaos-race soak demo kafkajs clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/onceflight
	$(GO) build -o $(BIN) ./cmd/onceflight

test: ## the whole test suite (what CI runs), with short fuzz runs of the decoders
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 8m ./...
	$(GO) test ./schemas -run '^$$' -fuzz '^FuzzDecodeCommand$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./kafkaconf -run '^$$' -fuzz '^FuzzParseProperties$$' -fuzztime $(FUZZTIME)

test-race: ## the test suite under the race detector
	$(GO) test -race -count=1 -timeout 15m ./...

lint: ## gofmt, go vet, staticcheck
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

fuzz: ## longer fuzz runs of every decoder (FUZZTIME=10m by default here)
	$(GO) test ./schemas -run '^$$' -fuzz '^FuzzDecodeCommand$$' -fuzztime $(or $(LONGFUZZ),10m)
	$(GO) test ./schemas -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(or $(LONGFUZZ),10m)
	$(GO) test ./internal/config -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(or $(LONGFUZZ),10m)
	$(GO) test ./kafkaconf -run '^$$' -fuzz '^FuzzParseProperties$$' -fuzztime $(or $(LONGFUZZ),10m)

bench: ## benchmarks (compare runs with benchstat)
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./schemas ./dedupe ./partitioner | tee bench.txt

chaos: ## failure tests on the built binary (kill -9, SIGSTOP, restarts), long
	ONCEFLIGHT_CHAOS=1 $(GO) test -count=1 -timeout 30m -v ./internal/e2e/

chaos-race: ## the chaos tests with the executor processes built with -race
	ONCEFLIGHT_CHAOS=1 ONCEFLIGHT_E2E_RACE=1 $(GO) test -count=1 -timeout 40m -v ./internal/e2e/

soak: ## mixed load with a fault every 20s for SOAK_DURATION (default 10m), then audit (not in test)
	ONCEFLIGHT_SOAK=1 SOAK_DURATION=$(or $(SOAK_DURATION),10m) $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./consumer

demo: build ## run the demo: embedded broker, executor, demo service, a table of outcomes
	./$(BIN) demo

kafkajs: build ## prove a kafkajs client can produce commands and read outcomes (needs npm)
	./scripts/kafkajs-check.sh ./$(BIN)

clean:
	rm -rf bin bench.txt
