# omnisat: `make demo` shows it working, `make test` runs every test. Both install what they need.
GO      ?= go
BIN     ?= bin/omnisat
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all deps build test demo bench fuzz package clean

all: build

## deps: install the system packages and Go modules for everything (apt-get; root or sudo)
deps:
	@scripts/deps.sh all

## build: the omnisat binary and the light omnisat-ctl client in bin/
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/omnisat
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-ctl ./cmd/omnisat-ctl

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

## bench: the benchmarks, with memory figures
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The arm64 sysroot stays in ~/.cache/omnisat (1.1 GB, slow to remake).
clean:
	rm -rf bin dist build
