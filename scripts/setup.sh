#!/usr/bin/env bash
# Installs every Debian package Loom needs to build, test and run. Idempotent: a
# package already present is skipped, so a warm machine pays only dpkg's check.
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
  python3-torch python3-numpy python3-grpcio python3-protobuf python3-prometheus-client
  fortunes fortunes-min
  clang-14 libclang-rt-14-dev
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
