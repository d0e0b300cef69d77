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
# Some CPUs list AMX in /proc/cpuinfo while the sandbox or hypervisor does not grant its register state:
# a GGML_NATIVE build then dies with SIGILL at its first tile instruction. This probe asks the kernel for
# the tile state and runs one tile instruction; it fails on such machines.
amx_usable() {
  grep -qw amx_tile /proc/cpuinfo || return 1
  command -v cc >/dev/null || return 1
  local probe rc; probe=$(mktemp -d)
  cat > "$probe/amx.c" <<'C'
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) return 1;
  _tile_release();
  return 0;
}
C
  rc=1
  if cc -O0 -mamx-tile "$probe/amx.c" -o "$probe/amx" 2>/dev/null; then
    ( "$probe/amx" ) 2>/dev/null && rc=0
  fi
  rm -rf "$probe"
  return $rc
}

# The build's instruction sets: the machine's own (GGML_NATIVE), or, where AMX is listed but not usable,
# every vector extension the CPU lists except AMX. LLAMA_CPP_NO_AMX=1 (set by `mesh bench` when a native
# build died at its first run) makes the choice for good on this machine: the probe above passes on some
# virtual machines whose AMX state is still lost by ggml's worker threads.
cpu_has() { grep -qw "$1" /proc/cpuinfo; }
mkdir -p "$DIR"
[ -n "${LLAMA_CPP_NO_AMX:-}" ] && touch "$DIR/.no-amx"
if cpu_has amx_tile && { [ -f "$DIR/.no-amx" ] || ! amx_usable; }; then
  ISA="native-without-amx"
  ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  cpu_has avx_vnni && ISA_FLAGS+=(-DGGML_AVX_VNNI=ON)
  cpu_has avx512f && ISA_FLAGS+=(-DGGML_AVX512=ON)
  cpu_has avx512vbmi && ISA_FLAGS+=(-DGGML_AVX512_VBMI=ON)
  cpu_has avx512_vnni && ISA_FLAGS+=(-DGGML_AVX512_VNNI=ON)
  cpu_has avx512_bf16 && ISA_FLAGS+=(-DGGML_AVX512_BF16=ON)
else
  ISA="native"
  ISA_FLAGS=(-DGGML_NATIVE=ON)
fi

# Built, and for this machine's instruction sets (a build made elsewhere is made again).
built() {
  [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ] && [ -f "$DIR/.built" ] \
    && [ "$(cat "$DIR/.built")" = "$ISA" ]
}

if built; then log "present in $BIN ($ISA)"; echo "$BIN"; exit 0; fi

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

log "configuring $SRC/vendor/llama.cpp for $ISA: ${ISA_FLAGS[*]}"
rm -f "$DIR/.built"
cmake -S "$SRC/vendor/llama.cpp" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  "${ISA_FLAGS[@]}" -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF >&2
log "building llama-bench and llama-server (about 12 min on 2 cores)"
cmake --build "$DIR/build" --config Release --target llama-bench llama-server -j "$(nproc)" >&2
echo "$ISA" > "$DIR/.built"
log "built in $BIN ($ISA)"
echo "$BIN"
