#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` and `llama-server` (the inference pod benchmark's peer) from the
# llama.cpp vendored in the llama-cpp-python 0.3.36 sdist, idempotently and without prompts. Everything
# goes to a cache directory OUTSIDE the repository (nothing of llama.cpp belongs in git):
#   ${LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-cache-mesh/llama.cpp-0.3.36}
# A second run finds the binaries and only prints the bin directory. An interrupted build resumes.
# cmake comes from apt when it is missing. Takes about 12 min on 2 cores.
# Usage: scripts/install-llama-cpp.sh   (prints the directory holding llama-bench and llama-server)
set -euo pipefail

VERSION=0.3.36
# The sdist's sha256 (pip also checks PyPI's own hash while downloading).
SDIST_SHA256=${LLAMA_CPP_SDIST_SHA256:-832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e}
DIR=${LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-cache-mesh/llama.cpp-$VERSION}
BIN=$DIR/build/bin

log() { printf '[llama.cpp] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
built() { [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ] && [ -f "$DIR/.built" ]; }

if built; then log "present in $BIN"; echo "$BIN"; exit 0; fi

mkdir -p "$DIR"
# One build at a time (the benchmark may start this script while a background run is still building).
exec 9>"$DIR/.lock"
flock 9
if built; then log "present in $BIN"; echo "$BIN"; exit 0; fi

if ! command -v cmake >/dev/null; then
  log "apt: installing cmake"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends cmake >&2
fi

SRC=$DIR/src
if [ ! -f "$SRC/.unpacked" ]; then
  rm -rf "$DIR/sdist" "$SRC"
  mkdir -p "$DIR/sdist" "$SRC"
  log "downloading the llama-cpp-python==$VERSION sdist"
  python3 -m pip download -q --no-deps --disable-pip-version-check --no-binary llama-cpp-python \
    --only-binary cmake,ninja,scikit-build-core -d "$DIR/sdist" "llama-cpp-python==$VERSION" >&2
  sdist=$(ls "$DIR"/sdist/llama_cpp_python-"$VERSION".tar.gz)
  if [ -n "$SDIST_SHA256" ]; then
    echo "$SDIST_SHA256  $sdist" | sha256sum -c --quiet - || { log "sha256 mismatch for $sdist"; exit 1; }
  fi
  tar -xzf "$sdist" -C "$SRC" --strip-components=1
  touch "$SRC/.unpacked"
fi

log "configuring $SRC/vendor/llama.cpp"
cmake -S "$SRC/vendor/llama.cpp" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DGGML_NATIVE=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF >&2
log "building llama-bench and llama-server (about 12 min on 2 cores)"
cmake --build "$DIR/build" --config Release --target llama-bench llama-server -j "$(nproc)" >&2
touch "$DIR/.built"
log "built in $BIN"
echo "$BIN"
