#!/usr/bin/env bash
# Installs every Debian package Loom needs to build, test and run. Idempotent: a
# package already present is skipped, so a warm machine pays only dpkg's check.
# Tests never skip for a missing tool: whatever a test runs is installed here.
set -euo pipefail
PKGS=(
  bazel-bootstrap bazel-platforms bazel-skylib
  build-essential pkg-config
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libgrpc-dev
  libabsl-dev libgloo-dev libucx-dev ucx-utils
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libsqlite3-dev
  libcpp-httplib-dev nlohmann-json3-dev libyaml-cpp-dev libssl-dev
  libonnx-dev libonnx-testdata
  # The SentencePiece tokenizer (runtime/data, libloom_sentencepiece.so); its
  # tests train on the fortunes' text and check GPT-2's BPE against a Python
  # implementation that needs only Debian's python3.
  libsentencepiece-dev
  python3 python3-torch python3-numpy python3-grpcio python3-protobuf python3-prometheus-client
  python3-yaml python3-crcmod python3-onnx
  fortunes fortunes-min
  clang-14 libclang-rt-14-dev
  # Tools the tests run: openssl (TLS certificates), iproute2 (network
  # namespaces), kubectl (the manifest test's kustomize cross-render), stress
  # (load for the load tests), ctags (the docs' call-path check).
  openssl iproute2 kubernetes-client stress universal-ctags
  # A real Slurm for tests/slurm: the controller, the node daemon, the
  # clients (srun, sbatch, squeue, scancel, scontrol) and munge.
  slurmctld slurmd slurm-client munge
  # The dashboard's browser tests (tests/dashboard): Debian's headless
  # Chromium, driven by puppeteer-core from npm (installed below).
  chromium nodejs
)
# A package whose command may come from elsewhere on the image: when the
# command is already on PATH the package is not installed over it (the CUDA
# image's Google Cloud SDK ships its own kubectl, which owns /usr/bin/kubectl).
declare -A PROVIDES=([kubernetes-client]=kubectl)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  if [ -n "${PROVIDES[$p]:-}" ] && command -v "${PROVIDES[$p]}" >/dev/null; then
    echo "setup: $p: using $(command -v "${PROVIDES[$p]}") already on PATH"
    continue
  fi
  missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# puppeteer-core for tests/dashboard, at the version pinned by its
# package-lock.json, into tests/dashboard/node_modules (git-ignored and
# .bazelignore'd). --ignore-scripts: no browser download; the tests drive
# Debian's /usr/bin/chromium.
DASH=$(cd "$(dirname "$0")/../tests/dashboard" && pwd)
want=$(node -e 'console.log(require(process.argv[1]).packages["node_modules/puppeteer-core"].version)' \
  "$DASH/package-lock.json")
have=$(node -e 'console.log(require(process.argv[1]).version)' \
  "$DASH/node_modules/puppeteer-core/package.json" 2>/dev/null || true)
if [ "$have" = "$want" ]; then
  echo "setup: puppeteer-core $have present"
else
  echo "setup: installing puppeteer-core $want (npm ci in tests/dashboard)"
  (cd "$DASH" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
