# tpdeploy — see README.md. `make demo` runs the main job, `make test` runs every test.
SHELL := /bin/bash
GO ?= go
TEMPORAL_VERSION := v1.5.1
BIN := $(CURDIR)/bin
DATA := $(CURDIR)/.tpdeploy-data

.PHONY: build test lint deps dev demo demo-down bench fuzz clean

build:
	$(GO) build -o $(BIN)/ ./worker ./starter ./lab/netns

# The Temporal CLI (dev server + Web UI), built from the Go module proxy at a pinned
# version: about 8 minutes the first time, cached by Go after that.
$(BIN)/temporal:
	CGO_ENABLED=0 GOBIN=$(BIN) $(GO) install -trimpath github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION)

# iproute2 gives `ip netns`, which the network tests and the demo use.
deps:
	@command -v ip >/dev/null || { apt-get update -qq && apt-get install -y -qq iproute2; }

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: deps lint $(BIN)/temporal
	$(GO) test -count=1 ./...

# Short fuzz runs of the parsers that read outside input.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./spec

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 5x ./...

dev: $(BIN)/temporal
	@mkdir -p $(DATA)
	$(BIN)/temporal server start-dev --db-filename $(DATA)/temporal.db --ui-port 8233

demo: deps build $(BIN)/temporal
	./scripts/demo.sh up

demo-down:
	./scripts/demo.sh down

clean: demo-down
	rm -rf $(BIN) $(DATA)
