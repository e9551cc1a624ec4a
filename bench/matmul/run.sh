#!/bin/sh
# Builds and runs the matmul benchmark (Loom vs raw OpenBLAS vs torch.matmul),
# printing GFLOP/s and ratios. Extra arguments go to Google Benchmark or, for
# --no-torch, --no-table and --torch-script=PATH, to the benchmark itself, e.g.
#   bench/matmul/run.sh --benchmark_filter=square
set -e
cd "$(dirname "$0")/../.."
exec bazel ${LOOM_BAZEL_STARTUP_FLAGS:-} run --jobs=2 //bench/matmul:matmul_benchmark -- "$@"
