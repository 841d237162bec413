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
	@awk 'BEGIN {FS = ":.*## "}; /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The version every binary reports (--version, tflo_build_info): the
# nearest tag, commits since, commit and -dirty, as git describe says.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/tflo-io/tflo/internal/version.Version=$(VERSION)
COMMANDS := ./starter ./workers/cmd/worker ./workers/cmd/simulator

.PHONY: build
build: ## compile every package; starter and the workers into ./bin, stamped with VERSION (git describe)
	$(GO) build $(PKGS)
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(COMMANDS)
	@$(BIN)/starter version

.PHONY: test
test: tools ## run every test with the race detector (real Temporal, InfluxDB, S3 servers; builds them first)
	TFLO_REQUIRE_SERVICES=1 $(GO) test -race -timeout $(TEST_TIMEOUT) $(PKGS)
	cd connectors/influx/lpcheck && $(GO) test -race ./... # line protocol vs InfluxDB 1.8's parser (a module of its own)

CHAOS_COUNT ?= 5
.PHONY: chaos
chaos: tools ## the long fault tests (SIGKILLed edge and central worker processes, Temporal restart, influxd and S3 outages, NATS cut) CHAOS_COUNT times with fresh seeds; TFLO_CHAOS_SEED=n replays one
	set -o pipefail; TFLO_REQUIRE_SERVICES=1 TFLO_CHAOS_LONG=1 $(GO) test -race -timeout 60m -count=$(CHAOS_COUNT) -v -run 'TestEdgeSIGKILLExactlyOnce|TestPortalFaults' ./testsuite/chaos/ | grep -v '^=== '

.PHONY: demo
demo: ## run the whole iot-portal on this machine (builds bin/temporal and bin/influxd first if missing); DEMO_ARGS="--duration 2m --dir ./demo-data"
	@missing=""; for b in temporal influxd; do [ -x $(BIN)/$$b ] || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  echo "first run: building$$missing into ./bin (the Temporal CLI takes ~10 minutes, influxd ~1 minute; packages are listed as they compile)"; \
	fi; \
	GOFLAGS=-v $(MAKE) --no-print-directory $(BIN)/temporal $(BIN)/influxd
	$(GO) run ./starter demo $(DEMO_ARGS)

.PHONY: ui-screenshot
ui-screenshot: ## screenshot the checkpoint coordinator's page in the demo's Temporal web UI (needs chromium and bin/temporal, bin/influxd); OUT=coordinator.png
	scripts/ui-screenshot.sh $(or $(OUT),coordinator.png)

.PHONY: record-histories
record-histories: RELEASE ?= $(shell git rev-parse --short HEAD)
record-histories: $(BIN)/temporal ## add workflow histories of this release (RELEASE=name, default the commit) under workflows/testdata/histories; never overwrites
	TFLO_RECORD_HISTORIES=1 TFLO_HISTORY_RELEASE=$(RELEASE) TFLO_REQUIRE_SERVICES=1 $(GO) test -run TestRecordHistoriesOnDevServer -count=1 ./workflows/

.PHONY: lint
lint: tools ## gofmt, go vet, staticcheck and workflowcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(BIN)/staticcheck $(PKGS)
	$(BIN)/workflowcheck ./workflows/...

GOVULNDB ?= https://vuln.go.dev
.PHONY: vulncheck
vulncheck: $(BIN)/govulncheck ## govulncheck against the Go vulnerability database, GOVULNDB (default https://vuln.go.dev; skipped, saying so, when it is unreachable)
	@case "$(GOVULNDB)" in file://*) reachable=1;; *) curl -fsS -m 10 -o /dev/null "$(GOVULNDB)/index/db.json" 2>/dev/null && reachable=1;; esac; \
	if [ -n "$$reachable" ]; then \
	  GOVULNDB=$(GOVULNDB) $(BIN)/govulncheck ./...; \
	else \
	  echo "vulncheck: skipped: the Go vulnerability database $(GOVULNDB) is not reachable from this machine (set GOVULNDB to a mirror or a file:// copy)"; \
	fi

.PHONY: bench
bench: ## run the benchmarks; x-<baseline> columns are ratios against a baseline measured in the same run
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) $(PKGS)

.PHONY: tools
tools: $(BIN)/staticcheck $(BIN)/workflowcheck $(BIN)/govulncheck $(BIN)/temporal $(BIN)/influxd $(BIN)/versitygw mosquitto ## build the pinned tools and test servers into ./bin (first time: ~15 min); check for mosquitto

# Mosquitto is a Debian package, not a Go module: the edge's crash tests
# run against it as well as mochi (testsuite/mosquittotest), and make test
# requires it. Installed with apt-get when it is missing and we are root;
# otherwise a note (make test then fails naming it).
.PHONY: mosquitto
mosquitto:
	@command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then apt-get install -y -qq mosquitto || { apt-get update -qq && apt-get install -y -qq mosquitto; }; \
	  else echo "note: mosquitto is missing: apt-get install -y mosquitto (Debian/Ubuntu), or set TFLO_MOSQUITTO to its path"; fi; }

$(BIN)/staticcheck $(BIN)/workflowcheck: tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	cd tools && GOBIN=$(BIN) $(GO) install tool
	@touch $(BIN)/staticcheck $(BIN)/workflowcheck

$(BIN)/govulncheck: tools/govulncheck/go.mod tools/govulncheck/go.sum
	@mkdir -p $(BIN)
	cd tools/govulncheck && GOBIN=$(BIN) $(GO) install tool
	@touch $(BIN)/govulncheck

# Servers used by the tests and the demo, each built from source through the
# Go module proxy and pinned (with checksums) by its own tools module,
# tools/<name>/go.mod: their dependency graphs conflict with each other and
# with tools/go.mod, and a module of its own gives each exactly the graph its
# authors tested. Changing a pin there rebuilds the binary.
#   temporal  github.com/temporalio/cli v1.5.1: dev server 1.29.1 + web UI 2.42.1 (~10 min cold)
#   influxd   github.com/influxdata/influxdb v1.8.10: InfluxDB 1.8 with the v2 write API (newer 1.x need Rust) (~1 min)
#   versitygw github.com/versity/versitygw v1.8.0: S3 gateway, posix backend, real SigV4 checks (~2 min)
# $(call build-server,<name>,<what it is>)
define build-server
	@mkdir -p $(BIN)
	@echo "building $(2), pinned in tools/$(1)"
	cd tools/$(1) && GOBIN=$(BIN) $(GO) install tool
	@touch $(BIN)/$(1)
endef

$(BIN)/temporal: tools/temporal/go.mod tools/temporal/go.sum
	$(call build-server,temporal,the Temporal CLI (dev server + web UI; the first build takes ~10 minutes))
$(BIN)/influxd: tools/influxd/go.mod tools/influxd/go.sum
	$(call build-server,influxd,InfluxDB 1.8)
$(BIN)/versitygw: tools/versitygw/go.mod tools/versitygw/go.sum
	$(call build-server,versitygw,the versitygw S3 gateway)

.PHONY: clean
clean: ## remove ./bin and test caches
	rm -rf $(BIN)
	$(GO) clean -testcache
