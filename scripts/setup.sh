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
  exit 0
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
