#!/usr/bin/env bash
# Builds the edge worker: Rust -> wasm32 (Debian's rustc with -Zbuild-std), wasm-bindgen glue into build/,
# then wasm-opt. Wrangler runs this before `wrangler dev` and `wrangler deploy` ([build] in wrangler.toml).
# When build/ is newer than every input it exits at once, so a fresh `wrangler dev` starts in seconds.
# Usage: ./build.sh [--force]    (EDGE_BUILD_FORCE=1 also forces a rebuild)
# Needs: .ci/setup.sh apt wasm-bindgen npm (rustc-web, rust-web-src, lld-22, wasm-bindgen-cli, node_modules).
set -euo pipefail
cd "$(dirname "$0")"
WORKER=$PWD
ROOT=$(cd .. && pwd)
OUT=$WORKER/build
STAMP=$OUT/.built

log() { printf '[edge-build] %s\n' "$*" >&2; }

# Several `wrangler dev` instances (parallel tests) may run this at once: one builds, the others wait for
# it and then find the output fresh.
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9

inputs=(src Cargo.toml entry.mjs build.sh ../shared/src ../shared/Cargo.toml ../Cargo.lock ../Cargo.toml)
# The small-embedding table the worker bundles: `make build` distils it from the model files.
TABLE=${MESH_EDGE_TABLE:-$ROOT/target/edge-table.bin}
[ -f "$TABLE" ] || { log "need $TABLE: run make build (distill-edge-table)"; exit 1; }
if ! cmp -s "$TABLE" "$OUT/edge-table.bin"; then
  cp "$TABLE" "$OUT/edge-table.bin.next" && mv "$OUT/edge-table.bin.next" "$OUT/edge-table.bin"
  log "edge table copied from $TABLE"
fi
force=${EDGE_BUILD_FORCE:-0}
[ "${1:-}" = "--force" ] && force=1
if [ "$force" != 1 ] && [ -f "$STAMP" ] && [ -f "$OUT/index.js" ] && [ -f "$OUT/index_bg.wasm" ] \
  && [ -z "$(find "${inputs[@]}" -newer "$STAMP" -print -quit)" ]; then
  log "up to date"
  exit 0
fi

# The wasm-bindgen CLI must match the wasm-bindgen crate exactly: both are pinned by Cargo.lock.
want=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/"/, "", $3); print $3; exit}' "$ROOT/Cargo.lock")
PATH=$PATH:$HOME/.cargo/bin
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
[ "$have" = "$want" ] || { log "need wasm-bindgen-cli $want (found '${have:-none}'): run .ci/setup.sh wasm-bindgen"; exit 1; }
WASM_OPT=$WORKER/node_modules/binaryen/bin/wasm-opt
[ -x "$WASM_OPT" ] || { log "need node_modules (binaryen): run .ci/setup.sh npm"; exit 1; }

# Debian's rustc has no bundled `rust-lld`; lld-22's wasm-ld is the same linker under its own name.
if ! command -v rust-lld >/dev/null; then
  for ld in wasm-ld-22 /usr/lib/llvm-22/bin/wasm-ld wasm-ld; do
    if command -v "$ld" >/dev/null; then export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=$(command -v "$ld"); break; fi
  done
fi

started=$(date +%s)
# Stamped with the start time: an input edited during the build makes the next run build again.
touch "$STAMP.next"
log "cargo build (wasm32-unknown-unknown, release)"
# Debian's rustc-web ships the wasm32 std sources that rustup's toolchain lacks here; its own target dir
# keeps the native and wasm builds (different compilers) from invalidating each other.
# No crate-wide `+simd128`: with it, rustc 1.96 / LLVM 22.1.8 miscompiles 32-byte equality reductions
# (`shared::auth::TenantKeys::tenant_for_key` never matched, so every API key was rejected). Code that
# wants SIMD enables it per function with `#[target_feature(enable = "simd128")]` and is tested in wasm.
RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 WASM_BINDGEN_USE_JS_SYS=1 \
  RUSTFLAGS="" CARGO_TARGET_DIR="$ROOT/target-wasm" \
  cargo build -p edge-worker --lib --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort

WASM=$ROOT/target-wasm/wasm32-unknown-unknown/release/edge_worker.wasm
# An input changed but the compiled module did not (a Cargo.lock edit for a native crate, a comment):
# the glue and the optimized module in build/ are still right. (The digest covers this script and the
# wasm-bindgen version too, which shape build/ as much as the module does.)
sum=$( { cat "$WASM" build.sh; echo "$have"; } | sha256sum | cut -d' ' -f1)
if [ "$force" != 1 ] && [ -f "$OUT/.source-sha256" ] && [ "$(cat "$OUT/.source-sha256")" = "$sum" ] \
  && [ -f "$OUT/index.js" ] && [ -f "$OUT/index_bg.wasm" ]; then
  mv "$STAMP.next" "$STAMP"
  log "module unchanged; done in $(( $(date +%s) - started )) s"
  exit 0
fi

rm -f "$STAMP" "$OUT/.source-sha256"
STAGE=$OUT/.stage
rm -rf "$STAGE"
log "wasm-bindgen"
wasm-bindgen "$WASM" --out-dir "$STAGE" --out-name index \
  --no-typescript --target module --experimental-reset-state-function --force-enable-abort-handler
# Wrangler's esbuild takes a plain wasm import, not a source-phase import.
sed -i 's/^import source /import /' "$STAGE/index.js"
log "wasm-opt -O"
# The features rustc's wasm32 target emits, plus exception handling (wasm-bindgen's abort handler).
"$WASM_OPT" -O --enable-exception-handling --enable-reference-types --enable-bulk-memory \
  --enable-nontrapping-float-to-int --enable-sign-ext --enable-mutable-globals --enable-multivalue --enable-simd \
  "$STAGE/index_bg.wasm" -o "$STAGE/index_bg.opt.wasm"
# Swap the new files in (each rename is atomic) for a `wrangler dev` that may be watching build/.
rm -rf "$OUT/snippets" && mv "$STAGE/snippets" "$OUT/snippets"
mv "$STAGE/index_bg.opt.wasm" "$OUT/index_bg.wasm"
mv "$STAGE/index.js" "$OUT/index.js"
rm -rf "$STAGE"
echo "$sum" > "$OUT/.source-sha256"
mv "$STAMP.next" "$STAMP"
log "done in $(( $(date +%s) - started )) s: $(stat -c %s "$OUT/index_bg.wasm") bytes of wasm"
