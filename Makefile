# ILB developer commands. Only Go (and make) are needed; tools are Go tool
# dependencies in go.mod.
GO      ?= go
BIN     := bin/ilb
PKGS    := ./...

.PHONY: all build test lint vet fmt demo bench bench-routing golden clean

all: build

## build: compile the ilb binary into bin/ilb
build:
	$(GO) build -o $(BIN) ./cmd/ilb

## test: vet, lint, race-enabled tests of every package (what CI runs)
test: vet lint
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

vet:
	$(GO) vet $(PKGS)

## lint: golangci-lint v2 (gofumpt, errorlint, importas, ...) per .golangci.yml
lint:
	$(GO) tool golangci-lint run $(PKGS)

## fmt: rewrite files with gofumpt and goimports
fmt:
	$(GO) tool golangci-lint fmt $(PKGS)

## demo: the whole stack on this machine: ILB, simulated engines, envoysim
demo:
	$(GO) run ./cmd/ilb demo --config examples/demo/ilb.yaml

## bench: Go benchmarks of the request path and the controller
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## bench-routing: the routing benchmark: every scenario, every policy, one
## simulated hour each; rewrites docs/benchmarks.md below its marker and
## the plots in docs/benchmarks/ (about a minute on 2 cores)
bench-routing:
	$(GO) run ./cmd/ilb sim --scenario all --seed 1 --plots docs/benchmarks --plot-format svg --report docs/benchmarks.md

## golden: regenerate golden files (testdata/ incl. metric expositions, envoy/*.yaml templates, examples/compose/envoy.yaml, examples/istio)
golden:
	$(GO) test ./xds/ ./envoy/ ./istio/ ./signals/ ./weights/ ./demand/ -update

clean:
	rm -rf bin
