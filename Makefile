# omnisat: `make demo` shows it working, `make test` runs every test. Both install what they need.
GO      ?= go
BIN     ?= bin/omnisat
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all deps build test demo bench footprint fuzz package clean

all: build

## deps: install the system packages and Go modules for everything (apt-get; root or sudo)
deps:
	@scripts/deps.sh all

## build: omnisat, its camera program omnisat-camera (the only one with OpenCV; omnisat finds
## it beside itself), its simulator program omnisat-simulator (omnisat simulate, run
## --simulator) and the light omnisat-ctl client in bin/
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/omnisat
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-camera ./cmd/omnisat-camera
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-ctl ./cmd/omnisat-ctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-simulator ./cmd/omnisat-simulator

## test: formatting, vet, all tests with -race, and a short fuzz run per decoder
test:
	@scripts/deps.sh test
	@scripts/test.sh

## demo: start the simulator and talk to it
demo:
	@scripts/deps.sh demo
	@$(MAKE) --no-print-directory build
	@scripts/demo.sh $(BIN)

## package: .deb packages for amd64 and arm64 in dist/ (arm64 cross-built), checked by lintian
package:
	@scripts/deps.sh package
	@packaging/package.sh

## bench: the benchmarks, with memory figures (installs what they drive, as make test does)
bench:
	@scripts/deps.sh test
	$(GO) test -run '^$$' -bench . -benchmem ./...

## footprint: what the real binary costs (CPU per streamed second, wake-ups, private memory,
## start-up) against a simulator in another process; FOOTPRINT_LONG=30m for the soak
footprint:
	@scripts/deps.sh test
	$(GO) test -run '^$$' -bench Footprint -benchtime 1x -timeout 90m ./internal/footprint

# The arm64 sysroot stays in ~/.cache/omnisat (1.1 GB, slow to remake).
clean:
	rm -rf bin dist build
