# ILB developer commands. Only Go (and make) are needed; tools are Go tool
# dependencies in go.mod.
GO      ?= go
BIN     := bin/ilb
PKGS    := ./...

.PHONY: all build test lint vet fmt demo bench bench-routing bench-tenants bench-tenants-e2e bench-xds bench-extproc bench-replicas bench-lora soak-connections golden fuzz clean kube istio

all: build

## build: compile the serving binary into bin/ilb (-tags serving: no demo,
## sim, engine or envoysim commands, no simulation code linked), and the
## full one, with those commands, into bin/ilb-lab
build:
	$(GO) build -tags serving -o $(BIN) ./cmd/ilb
	$(GO) build -o $(BIN)-lab ./cmd/ilb

## test: vet, lint, race-enabled tests of every package (what CI runs),
## printed as go test prints them, then the tests skipped and why (a
## browser, etcd, kube-apiserver or istiod missing)
test: vet lint
	$(GO) run ./internal/testrun -race -count=1 -timeout 30m $(PKGS)

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

## ha-demo: ILB as 3 replicas on a 3-member etcd (Debian's etcd-server:
## apt-get install etcd-server), simulated engines and envoysim listing
## every replica; under load the leader is stopped; reports what clients
## saw (failed requests by source and fail mode) and how leadership moved
ha-demo:
	$(GO) run ./cmd/ilb ha-demo --config examples/demo/ilb.yaml

## kube: build a real kube-apiserver from the Go module proxy into
## .tools/kube (once; about 5 minutes and 2.4 GB of memory on 2 cores):
## the Kubernetes tests start it on loopback over Debian's etcd, and skip
## without it (ILB_REQUIRE_KUBE=1 makes that a failure, as in CI)
kube:
	./hack/kube-apiserver.sh .tools/kube

## istio: build a real istiod (pilot-discovery) from the Go module proxy
## into .tools/istio, with Istio's CRDs (once; about 8 minutes and 2.3 GB
## of memory on 2 cores): the Istio tests run it against the kube-apiserver
## of `make kube`, and skip without it (ILB_REQUIRE_ISTIO=1 makes that a
## failure, as in CI)
istio:
	./hack/istiod.sh .tools/istio

## bench: Go benchmarks of the request path and the controller
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## bench-xds: the xDS fleet benchmark: ILB's xDS server in its own
## process on one core, XDS_STREAMS simulated Envoys (one connection and
## ADS stream each, state of the world and delta, ACKing as Envoy does) in
## another: time to full config at connect, time until the last Envoy
## ACKs a new weights version and an EDS change, ILB's CPU for each, heap
## and RSS per connected Envoy; then 10 waves of 1,000 Envoys with new
## node ids, and what ILB keeps after each. Writes out/bench-xds.md
## (about four minutes on 2 cores; 10,000 streams need `ulimit -n` >= 20000).
XDS_STREAMS ?= 100,1000,10000
bench-xds:
	@mkdir -p out
	$(GO) build -o out/ilb-lab ./cmd/ilb
	out/ilb-lab bench-xds --streams $(XDS_STREAMS) --modes sotw,delta | tee out/bench-xds.md
	out/ilb-lab bench-xds --streams 1000 --modes sotw --waves 10 | tee -a out/bench-xds.md

## bench-routing: the routing benchmark: every scenario, every policy, one
## simulated hour each; the scenarios with events again at 0.8 of the
## fleet's measured saturation throughput; then load sweeps (0.2 to 1.3 of
## the fleet's measured saturation throughput, light load included, 30
## simulated minutes per load) of the synthetic day (short prompts),
## long-prompt agent traffic and bursty code completion, and, with
## TRACES=DIR holding azure-llm-2023-conv.csv and azure-llm-2023-code.csv,
## of those traces on the fleets of the diurnal, outage, residency and
## drain scenarios. Each sweep checks ILB at every load against the best
## deployable baseline (least_loaded_seen included; the oracle least_loaded
## is shown). Rewrites docs/benchmarks.md below its marker and the plots in
## docs/benchmarks/ (about 20 minutes on 2 cores, 35 with TRACES).
LOADS ?= 0.2,0.3,0.4,0.5,0.7,0.9,1.0,1.1,1.3
TRACE_SCENARIOS ?= diurnal,outage,residency,drain
bench-routing:
	$(GO) run ./cmd/ilb sim --scenario all --seed 1 --plots docs/benchmarks --plot-format svg --report docs/benchmarks.md --report-section scenarios
	$(GO) run ./cmd/ilb sim --scenario outage,residency,drain,burst --seed 1 --duration 30m --load 0.8 --report docs/benchmarks.md --report-section events-at-load
	$(GO) run ./cmd/ilb sim --scenario diurnal,long-prompt,burst --seed 1 --duration 30m --loads $(LOADS) --report docs/benchmarks.md --report-section sweeps
	@if [ -n "$(TRACES)" ]; then \
		$(GO) run ./cmd/ilb sim --scenario $(TRACE_SCENARIOS) --seed 1 --duration 30m --loads $(LOADS) --trace $(TRACES)/azure-llm-2023-conv.csv --report docs/benchmarks.md --report-section sweep-azure-conv && \
		$(GO) run ./cmd/ilb sim --scenario $(TRACE_SCENARIOS) --seed 1 --duration 30m --loads $(LOADS) --trace $(TRACES)/azure-llm-2023-code.csv --report docs/benchmarks.md --report-section sweep-azure-code; \
	else echo "TRACES not set: the Azure trace sweeps are left as they are"; fi

## bench-tenants: fair shedding between tenants: four tenants with equal
## shares, one of them flooding at 3x its share for 30% of the run (the
## tenant-flood scenario), at 0.92 and 1.0 of the fleet's measured
## saturation throughput over the run (the flood takes the demand to about
## 1.2 and 1.3); ILB, ILB blind to tenants and the baselines; rewrites the
## "tenants" sections of docs/benchmarks.md (about a minute on 2 cores)
bench-tenants:
	$(GO) run ./cmd/ilb sim --scenario tenant-flood --seed 1 --duration 30m --load 0.92 --policies ilb,ilb-untenanted,proportional,waterfall,least_loaded_seen --report docs/benchmarks.md --report-section tenants-0.92
	$(GO) run ./cmd/ilb sim --scenario tenant-flood --seed 1 --duration 30m --load 1.0 --policies ilb,ilb-untenanted,proportional,waterfall,least_loaded_seen --report docs/benchmarks.md --report-section tenants-1.0

## bench-tenants-e2e: the same tenant flood end to end, in wall-clock
## time: envoysim, ILB (ext_proc over gRPC, controller, signals) and
## simulated engines on loopback, four tenants of one source sending
## open-loop streams, one flooding at 3x its share; reports the other
## tenants' share of requests within the 2 s TTFT target during the flood
## over before it, at loads 0.92 and 1.0 (about 5 minutes)
bench-tenants-e2e:
	$(GO) test -run '^$$' -bench TenantFloodEndToEnd -benchtime 1x -timeout 30m ./test/

## soak-connections: the connection flood at the issue's scale: 20,000
## connections that never send a byte (10,000 on the ext_proc port,
## 10,000 on the xDS port, from two child processes) against ILB's default
## limits; admin, a new xDS client and a new ext_proc client must be
## served, and routing keep 95 % of its rate (about a minute; needs
## `ulimit -n` >= 20000)
soak-connections:
	ILB_SOAK=1 $(GO) test -run '^TestConnectionFloodAtScale$$' -count 1 -v -timeout 10m ./test/

## bench-extproc: ext_proc's CPU per request — the demo world, replica
## picking live — against a bare CONTINUE-only gRPC server (the floor:
## grpc-go's cost of a stream), each in a child process pinned to the last
## CPU whose own CPU time is read, over real gRPC on loopback, with a
## client playing Envoy's filter (headers, BUFFERED body, response headers):
## 1 KiB and 256 KiB chat bodies, 16 and 64 streams, EXTPROC_REQUESTS each,
## ten alternating rounds; prints the ILB/floor ratios (targets 1.3 and
## 1.5). Then the same for ILB as an InferencePool's endpoint picker
## (istiod's full-duplex stream, 32 tokens streamed back) against a bare
## floor echoing every body chunk (target 1.3)
EXTPROC_REQUESTS ?= 20000
bench-extproc:
	$(GO) test -run '^$$' -bench ServerCPU -benchtime $(EXTPROC_REQUESTS)x -count 1 ./extproc/
	$(GO) test -run '^$$' -bench PickerCPU -benchtime $(EXTPROC_REQUESTS)x -count 1 ./extproc/

## bench-replicas: replica picking side by side — Envoy's least request
## and round robin, a session hash, a GIE/llm-d-style prefix scorer and
## ILB — on multi-turn, agent, RAG and no-reuse workloads at loads 0.5 to
## 1.3, three seeds each (virtual time; about 10 minutes on 2 cores);
## rewrites the "replicas" section of docs/benchmarks.md; then the
## request-path cost of one decision (package picker)
bench-replicas:
	$(GO) run ./cmd/ilb bench-replicas --report docs/benchmarks.md
	$(GO) test -run '^$$' -bench Decision -benchtime 20000x ./picker/

## bench-lora: LoRA adapters (64 per model, Zipf popularity) on engines
## with vLLM's --max-loras 8 (16 in CPU memory), then 4 (8 in CPU memory):
## the same replica policies, the GIE-style scorer with its LoRA affinity
## scorer; rewrites the "lora" and "lora-4-slots" sections of
## docs/benchmarks.md (virtual time; a few minutes on 2 cores)
bench-lora:
	$(GO) run ./cmd/ilb bench-replicas --scenario lora --section lora --loads 0.3,0.5,0.7,0.9,1.1,1.3 --report docs/benchmarks.md
	$(GO) run ./cmd/ilb bench-replicas --scenario lora --section lora-4-slots --max-loras 4 --loads 0.3,0.5,0.7,0.9,1.1,1.3 --report docs/benchmarks.md

## golden: regenerate golden files (testdata/ incl. metric expositions, envoy/*.yaml templates, examples/compose/envoy.yaml, examples/istio)
golden:
	$(GO) test ./xds/ -update
	$(GO) test ./envoy/ ./istio/ ./signals/ ./weights/ ./controller/ ./demand/ ./ha/ ./extproc/ -update

## fuzz: run every fuzz target of an untrusted input, one after another,
## for FUZZTIME each: default 1000000x, a million inputs (about 5 to 30
## minutes a target with one worker on a busy 2-core machine). A duration
## (FUZZTIME=30s) works too, but Go 1.26 may then fail a clean run with
## "context deadline exceeded" and no crasher (golang/go#75804, fixed in
## Go 1.27). Seed corpora (f.Add and testdata/fuzz/) run in `make test`.
## A crasher is written to <pkg>/testdata/fuzz/<Target>/; logs and a
## summary go to out/fuzz/. FUZZPARALLEL workers per target (default 1);
## FUZZ_TARGETS="<pkg>:<Target> ..." runs some only.
FUZZTIME         ?= 1000000x
FUZZMINIMIZETIME ?= 50x
FUZZPARALLEL     ?= 1
FUZZ_TARGETS     ?= \
	./config:FuzzParse \
	./envoy:FuzzBundle \
	./signals:FuzzParseTargets \
	./signals:FuzzParseExposition \
	./controller:FuzzParseDemandFile \
	./openai:FuzzRequestBody \
	./openai:FuzzBodyReadAsEnginesRead \
	./extproc:FuzzStream \
	./demand:FuzzReport \
	./xds:FuzzRequests

fuzz:
	@mkdir -p out/fuzz; : > out/fuzz/summary.txt; failed=0; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; start=$$(date +%s); \
		{ $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) \
			-parallel $(FUZZPARALLEL) -timeout 0 $$pkg 2>&1; echo $$? > out/fuzz/$$name.rc; } | tee out/fuzz/$$name.log; \
		rc=$$(cat out/fuzz/$$name.rc); result=ok; [ "$$rc" = 0 ] || { result=FAIL; failed=1; }; \
		secs=$$(( $$(date +%s) - start )); \
		execs=$$(grep -o 'execs: [0-9]*' out/fuzz/$$name.log | tail -1 | tr -dc 0-9); \
		echo "$$result $$pkg $$name: $${execs:-0} execs in $${secs}s ($$(( $${execs:-0} / ($$secs > 0 ? $$secs : 1) ))/s)" >> out/fuzz/summary.txt; \
	done; \
	echo "== fuzz summary"; cat out/fuzz/summary.txt; exit $$failed

clean:
	rm -rf bin
