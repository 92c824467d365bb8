GO ?= go
BIN := bin/kuma-dp
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Both binaries print it (`version`) and publish it (kuma_dp_build_info, kuma_cp_build_info).
LDFLAGS := -s -w -X github.com/kumadp/kuma-dp/internal/buildinfo.Version=$(VERSION)

.PHONY: build test test-deps vet fmt bench bench-system bench-dns bench-memory run

build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/kuma-dp

build-cp: build
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o bin/kuma-cp ./cmd/kuma-cp

# The README's test command: installs what the tests need, then vet + every test.
test: test-deps
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 14m ./...
	# Fuzz budgets are execution counts, not durations: Go 1.26's fuzz coordinator can fail a
	# duration run at its deadline with a bare "context deadline exceeded" (golang/go#75804).
	$(GO) test -run '^$$' -fuzz FuzzServe -fuzztime 12000x -fuzzminimizetime 500x ./dnsserver
	$(GO) test -run '^$$' -fuzz FuzzTemplate -fuzztime 150000x -fuzzminimizetime 500x ./hostname

test-deps:
	@scripts/test-deps.sh

# Micro-benchmarks: in-process hot paths (go test -bench), ns/op and allocations per op.
# The command packages are left out: their tests run real processes.
bench:
	$(GO) test -run '^$$' -bench . -benchmem $$($(GO) list ./... | grep -v '/cmd/')

# System benchmarks: real processes, fleets of agents, network namespaces. Each prints its
# own figures (medians with min and max, CPU time, the load average); tproxyinstall needs
# root and says so when it is not.
bench-system:
	$(GO) run ./bench/agentstart
	$(GO) run ./bench/tproxyinstall
	$(GO) test -run '^$$' -bench . -benchtime 20x ./cmd/kuma-cp

run: build
	$(BIN) run --dataplane-file testdata/mesh/dataplane.yaml --policies-dir testdata/mesh/policies

# Resident memory of kuma-dp beside CoreDNS hosts, a bare miekg/dns server, nsd and dnsmasq
# (when installed) serving the same names, in one run.
bench-memory:
	bench/memory.sh

# dnsperf against our resolver, CoreDNS hosts and a bare miekg/dns server, in one run.
bench-dns:
	bench/dns.sh
