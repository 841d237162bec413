# tflo — make targets. `make` (or `make help`) lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO       ?= go
BIN      := $(CURDIR)/bin
PKGS     ?= ./...
BENCH    ?= .
BENCHTIME ?= 1s
TEST_TIMEOUT ?= 20m

export PATH := $(BIN):$(PATH)

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "}; /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## compile every package and command
	$(GO) build $(PKGS)

.PHONY: test
test: ## run every test with the race detector (starts what the tests need)
	$(GO) test -race -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: lint
lint: tools ## go vet, staticcheck and workflowcheck
	$(GO) vet $(PKGS)
	$(BIN)/staticcheck $(PKGS)
	$(BIN)/workflowcheck ./workflows/...

.PHONY: bench
bench: ## run the benchmarks; x-<baseline> columns are ratios against a baseline measured in the same run
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) $(PKGS)

.PHONY: tools
tools: $(BIN)/staticcheck $(BIN)/workflowcheck $(BIN)/influxd $(BIN)/versitygw ## build the pinned tools (tools/go.mod) into ./bin

# Servers used by the tests and the demo. Each builds from source through the
# Go module proxy with its own go.mod (so its dependency graph is the one its
# authors tested), pinned by version here.
TEMPORAL_CLI_VERSION := v1.5.1

$(BIN)/temporal:
	@mkdir -p $(BIN)
	@echo "building the Temporal CLI $(TEMPORAL_CLI_VERSION) (dev server + web UI) — the first build takes ~10 minutes"
	GOBIN=$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

$(BIN)/staticcheck $(BIN)/workflowcheck: tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	cd tools && GOBIN=$(BIN) $(GO) install tool
	@touch $(BIN)/staticcheck $(BIN)/workflowcheck

# influxd v1.8.10 (pure Go; newer 1.x need a Rust library) for the Influx sink tests.
# It builds with its own go.mod, pinned by the version here.
INFLUXD_VERSION := v1.8.10
$(BIN)/influxd:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/influxdata/influxdb/cmd/influxd@$(INFLUXD_VERSION)

# versitygw v1.8.0 (posix backend, real SigV4 checks) for the S3 store integration tests.
VERSITYGW_VERSION := v1.8.0
$(BIN)/versitygw:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

.PHONY: clean
clean: ## remove ./bin and test caches
	rm -rf $(BIN)
	$(GO) clean -testcache
