# tpdeploy — see README.md. `make demo` runs the main job, `make test` runs every test.
SHELL := /bin/bash
GO ?= go
TEMPORAL_VERSION := v1.5.1
BIN := $(CURDIR)/bin
DATA := $(CURDIR)/.tpdeploy-data

.PHONY: build test lint deps dev demo demo-down bench faults fuzz clean lab-images lab-up lab-down

build:
	$(GO) build -o $(BIN)/ ./worker ./starter ./lab/netns ./lab/labctl

# The Temporal CLI (dev server + Web UI), built from the Go module proxy at a pinned
# version: about 8 minutes the first time, cached by Go after that.
$(BIN)/temporal:
	CGO_ENABLED=0 GOBIN=$(BIN) $(GO) install -trimpath github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION)

# iproute2 gives `ip netns` (network tests); curl is used by the demo; chromium drives the
# Temporal UI in the UI test; busybox-static is the shell and tail in the lab's vLLM image.
# The Docker engine must be running (the lab's containers); the tests fail loudly without it.
deps:
	@command -v ip >/dev/null && command -v curl >/dev/null && command -v chromium >/dev/null && dpkg -s busybox-static >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq iproute2 curl chromium busybox-static; }
	@docker version --format '{{.Server.Version}}' >/dev/null || { echo "the Docker engine is not running"; exit 1; }

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: deps lint $(BIN)/temporal
	$(GO) test -count=1 -timeout 45m ./...

# The whole fault matrix (every step × every fault, about an hour here); it rewrites the
# table in README.md. `make test` runs one cell per fault.
faults: deps $(BIN)/temporal
	TPDEPLOY_FAULTS=all TPDEPLOY_FAULTS_README=1 $(GO) test -count=1 -timeout 150m -run TestFaultMatrix -v ./e2e

# Short fuzz runs of the parsers that read outside input.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./spec
	$(GO) test -run '^$$' -fuzz FuzzClassify -fuzztime 30s ./logscan

# The lab alone (see lab/README.md); `docker-compose --profile lab up` needs these images.
lab-images: $(BIN)/temporal
	$(GO) run ./lab/labctl images --temporal $(BIN)/temporal

lab-up: build $(BIN)/temporal
	$(BIN)/labctl up --prefix tpd-lab --temporal $(BIN)/temporal

lab-down: build
	$(BIN)/labctl down --prefix tpd-lab

# Figures, not assertions: the 16-node plan, then (on a lab) the deploy workflow against the
# hand-written script interleaved, the seed's failure 1, and history events per deploy.
bench: deps $(BIN)/temporal
	$(GO) test -run '^$$' -bench . -benchtime 5x ./activities
	$(GO) test -run '^$$' -bench . -benchtime 1x ./e2e

dev: $(BIN)/temporal
	@mkdir -p $(DATA)
	$(BIN)/temporal server start-dev --db-filename $(DATA)/temporal.db --ui-port 8233 \
	  --search-attribute ClusterName=Keyword --search-attribute DeployPhase=Keyword

demo: deps build $(BIN)/temporal
	./scripts/demo.sh up

demo-down: build
	./scripts/demo.sh down

clean: demo-down
	rm -rf $(BIN) $(DATA)
