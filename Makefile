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
tools: $(BIN)/staticcheck $(BIN)/workflowcheck ## build the pinned tools (tools/go.mod) into ./bin

$(BIN)/staticcheck $(BIN)/workflowcheck: tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	cd tools && GOBIN=$(BIN) $(GO) install tool
	@touch $(BIN)/staticcheck $(BIN)/workflowcheck

.PHONY: clean
clean: ## remove ./bin and test caches
	rm -rf $(BIN)
	$(GO) clean -testcache
