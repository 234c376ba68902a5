# tpdeploy — see README.md. `make demo` runs the main job, `make test` runs every test,
# `make check` the fast ones (no Docker, no Temporal server).
SHELL := /bin/bash
GO ?= go
TEMPORAL_VERSION := v1.5.1
STATICCHECK_VERSION := v0.8.2
WORKFLOWCHECK_VERSION := v0.6.0
BIN := $(CURDIR)/bin
DATA := $(CURDIR)/.tpdeploy-data

.PHONY: test-table build test check lint deps dev demo demo-down bench faults fuzz clean lab-images lab-up lab-down

build:
	$(GO) build -o $(BIN)/ ./worker ./starter ./router ./lab/netns ./lab/labctl
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./scripts/proofread

# The Temporal CLI (dev server + Web UI), built from the Go module proxy at a pinned
# version: about 8 minutes the first time, cached by Go after that.
$(BIN)/temporal:
	CGO_ENABLED=0 GOBIN=$(BIN) $(GO) install -trimpath github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION)

# iproute2 gives `ip netns` (network tests); nftables the firewall that drops the ephemeral
# range in a namespace (activities' TestFirewallDroppingEphemeralPortsIsRefusedAtPlan); curl is used by the demo; chromium drives the
# Temporal UI in the UI test; busybox-static is the shell in the test images; debootstrap builds
# the lab's torch base (Debian trixie + python3-torch, lab/torch.go) from Debian's mirror.
# The Docker engine must be running (the lab's containers); the tests fail loudly without it.
deps:
	@command -v ip >/dev/null && command -v nft >/dev/null && command -v curl >/dev/null && command -v chromium >/dev/null && dpkg -s busybox-static >/dev/null 2>&1 && command -v debootstrap >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq iproute2 nftables curl chromium busybox-static debootstrap; }
	@docker version --format '{{.Server.Version}}' >/dev/null || { echo "the Docker engine is not running"; exit 1; }

# The linters, pinned and built into bin/ once (a version in the path, so a bump rebuilds).
STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
WORKFLOWCHECK := $(BIN)/workflowcheck-$(WORKFLOWCHECK_VERSION)/workflowcheck
$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(WORKFLOWCHECK):
	GOBIN=$(dir $@) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

lint: $(STATICCHECK) $(WORKFLOWCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) vet -tags lab ./worker
	$(STATICCHECK) ./...
	$(WORKFLOWCHECK) -config workflowcheck.yaml ./workflows/...

# Fast and without Docker, root or a Temporal server: the linters, then with -race every
# package's untagged tests (the agent's activities against fakes and temporary
# directories, the workflows' testsuite and replay tests, the pure packages).
check: lint
	$(GO) test -count=1 -race -timeout 10m ./...

# Everything: check, then the integration-tagged tests (Docker, namespaces, the dev server).
# Tests that need those carry build tag integration; every other test runs in `make
# check`, so a new test is in the fast loop unless it says otherwise. scripts/integration
# runs the e2e tests in two shards at once, beside the other integration packages.
test: deps check $(BIN)/temporal
	GO=$(GO) ./scripts/integration

# The whole fault matrix (every step × every fault, about an hour here); it rewrites the
# table in docs/faults.md. `make test` runs one cell per fault.
faults: deps $(BIN)/temporal
	TPDEPLOY_FAULTS=all TPDEPLOY_FAULTS_WRITE=1 $(GO) test -count=1 -timeout 150m -tags integration -run TestFaultMatrix -v ./e2e

# Short fuzz runs of the parsers that read outside input.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./internal/spec
	$(GO) test -run '^$$' -fuzz FuzzClassify -fuzztime 30s ./internal/logscan
	$(GO) test -run '^$$' -fuzz FuzzParseRead -fuzztime 30s ./internal/release

# The lab alone (see lab/README.md); `docker-compose --profile lab up` needs these images.
lab-images: $(BIN)/temporal
	$(GO) run ./lab/labctl images --temporal $(BIN)/temporal

lab-up: build $(BIN)/temporal
	$(BIN)/labctl up --prefix tpd-lab --topology $(TOPOLOGY) --temporal $(BIN)/temporal

lab-down: build
	$(BIN)/labctl down --prefix tpd-lab

# Figures, not assertions: the 16-node plan, then (on a lab) the deploy workflow against the
# hand-written script interleaved, the seed's failure 1, and history events per deploy; the
# router's added latency and requests per second (TPDEPLOY_ROUTER_BIN=bin/router measures the
# binary in a process of its own, TPDEPLOY_ROUTER_CPUS=0 on one core).
bench: deps $(BIN)/temporal
	$(GO) test -tags integration -run '^$$' -bench . -benchtime 5x ./activities ./internal/dataplane
	$(GO) test -run '^$$' -bench PlanRing ./internal/netplan
	$(GO) test -run '^$$' -bench FanOut -benchtime 1x ./internal/weights/transfer
	$(GO) test -run '^$$' -bench Router -benchtime 20000x ./internal/router
	$(GO) test -run '^$$' -bench . -benchtime 100000x ./internal/logscan
	$(GO) test -tags integration -run '^$$' -bench . -benchtime 1x ./e2e

dev: $(BIN)/temporal
	@mkdir -p $(DATA)
	$(BIN)/temporal server start-dev --db-filename $(DATA)/temporal.db --ui-port 8233 \
	  --search-attribute ClusterName=Keyword --search-attribute DeployPhase=Keyword

# The demo's lab: TOPOLOGY=spark (the seed: two DGX Sparks on two RoCE rails, so the run
# ends with the data-plane line), pair, triangle or ring4 (lab/README.md).
TOPOLOGY ?= spark
demo: deps build $(BIN)/temporal
	TOPOLOGY=$(TOPOLOGY) ./scripts/demo.sh up

demo-down: build
	./scripts/demo.sh down

clean: demo-down
	rm -rf $(BIN) $(DATA)

# Rewrites docs/tests.md's table of every test; with TIMES=log.json (a `go test -json` log)
# it takes the tests' times from it, otherwise it keeps the table's.
test-table:
	$(GO) run ./scripts/testtable $(if $(TIMES),-times $(TIMES))
