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

# Regenerates the README's "Measured figures" table: runs every command the
# table quotes (Go benchmarks, capbench bench and chaos runs; rows declared in
# internal/figures/rows.go, docs/figures.md), keeps each run's raw output in
# capbench-out/figures/ and rewrites README.md between its figures markers
# only when every row succeeded. FIGURES_ARGS='--rows stream --dry-run' etc.
FIGURES_ARGS  ?=
figures: build
	$(GO) run ./internal/figures/cmd --capbench $(BIN) $(FIGURES_ARGS)

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
