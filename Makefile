# capbench build and test entry points. `make test` is what CI runs.
GO            ?= go
PKG           := ./...
BIN           := bin/capbench
IMAGE         ?= capbench:dev
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT  ?= 20m
BENCH         ?= .
BENCHTIME     ?= 1s

.PHONY: all build test test-short lint bench figures image demo clean chaos

all: build

# Static, so the same binary also runs in the FROM-scratch image and the
# container backend of `capbench run` can use it from anywhere.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/capbench

# All tests, Ginkgo suites included (they run through go test). The
# summary tool prints one line per package, a failing package's output, and
# at the end every skipped spec with its reason.
test:
	GO=$(GO) $(GO) run ./internal/testsummary -count=1 -timeout $(TEST_TIMEOUT) $(PKG)

# Skips container, npm and slow specs.
test-short:
	GO=$(GO) $(GO) run ./internal/testsummary -short -count=1 $(PKG)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKG)
	$(GO) run $(STATICCHECK) $(PKG)

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem $(PKG)

# Every figure of the README's "Measured figures" table, each by the command
# the table names (Go benchmarks and capbench runs; the whole set takes a few
# minutes on two cores). Ratios are measured side by side within each command.
FIG_TMP ?= $(or $(TMPDIR),/tmp)/capbench-figures
figures: build
	$(GO) test ./capture/proxy -run '^$$' -bench StreamTTFT
	$(GO) test ./capture/consumer -run '^$$' -bench ConsumeCold200x32k -benchtime 20x
	$(GO) test ./capture/proxy -run '^$$' -bench ProxyFileStore -benchtime 1500x
	$(GO) test ./capture/proxy -run '^$$' -bench BenchmarkRequestBodyMemory -benchtime 1x
	$(GO) test ./capture/proxy -run '^$$' -bench BenchmarkLongRollout -benchtime 1x
	$(GO) test ./capture/store -run '^$$' -bench ResolveRead200x32k -benchtime 30x
	$(GO) test ./capture/store -run '^$$' -bench 'BenchmarkPut/lazy-state' -benchtime 8000x
	$(GO) test ./capture/store/natsstore -run '^$$' -bench BenchmarkPut -benchtime 1s -count 3
	$(GO) test ./fakes/vllm -run '^$$' -bench NonStreamingVsTrivial -benchtime 150x -count 6
	$(GO) test ./bench -run xxx -bench LoadGeneratorVsWrk -benchtime 1x
	rm -rf $(FIG_TMP) && mkdir -p $(FIG_TMP)
	cd $(FIG_TMP) && $(CURDIR)/$(BIN) bench --time-scale 0.1 --slo ttft=2s,tpot=50ms --progress off
	cd $(FIG_TMP) && $(CURDIR)/$(BIN) bench --time-scale 0.1 --requests 100 --buffered-streams --progress off
	cd $(FIG_TMP) && $(CURDIR)/$(BIN) bench --concurrency 16 --requests 2000 --rounds 3 --progress off
	cd $(FIG_TMP) && $(CURDIR)/$(BIN) bench --sweep concurrency=4,6,7,8,9,10,12 --prompt-tokens 26700 --max-tokens 256 --paths direct --time-scale 0.3 --requests 44 --warmup-requests 6 --cooldown-requests 6 --progress off
	cd $(FIG_TMP) && $(CURDIR)/$(BIN) bench --workload sessions --sessions 8 --concurrency 4 --progress off
	$(BIN) chaos --duration 30s --kills 30 --calls 50000 --concurrency 16

# The chaos scenarios, longer than the bounded form `make test` runs
# (docs/chaos.md). Override e.g. CHAOS_ARGS='--duration 5m --kills 30'.
CHAOS_ARGS    ?= --duration 30s --kills 30 --calls 50000 --concurrency 16
chaos: build
	$(BIN) chaos $(CHAOS_ARGS)

# A FROM-scratch image holding the static binary (the fake vLLM and the proxy).
image:
	mkdir -p build/image
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags='-s -w' -o build/image/capbench ./cmd/capbench
	cp deploy/Dockerfile build/image/Dockerfile
	docker build -t $(IMAGE) build/image

# The main job on the embedded default: in-process fake vLLM + capture proxy.
demo:
	$(GO) run ./cmd/capbench run

clean:
	rm -rf bin build capbench-out
