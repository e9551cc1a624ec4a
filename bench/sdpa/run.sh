#!/bin/bash
# SDPA benchmark, one invocation: builds //bench/sdpa:sdpa_bench, runs the
# PyTorch 1.13 written-out attention baseline (torch_attention_bench.py,
# torch.set_num_threads(THREADS)), then the C++ benchmark (LOOM_NUM_THREADS=
# THREADS), which prints flash, memeff, math and torch side by side with ratios.
# THREADS defaults to 2.
#
#   bench/sdpa/run.sh [T list, default 256,1024,4096] [modes, default fwd,fwdbwd] [threads, default 2]
#
# BAZEL_OUTPUT_BASE selects the Bazel output base (default: the sdpa helper's).
set -euo pipefail
cd "$(dirname "$0")/../.."
TS="${1:-256,1024,4096}"
MODES="${2:-fwd,fwdbwd}"
THREADS="${3:-2}"
OB="${BAZEL_OUTPUT_BASE:-/root/.cache/bazel_ob/sdpa}"
bazel --output_base="$OB" build --jobs=2 //bench/sdpa:sdpa_bench >/dev/null 2>&1 ||
  bazel --output_base="$OB" build --jobs=2 //bench/sdpa:sdpa_bench
BIN="$(bazel --output_base="$OB" info bazel-bin 2>/dev/null)/bench/sdpa/sdpa_bench"
TORCH_OUT="$(mktemp /tmp/sdpa_torch.XXXXXX)"
trap 'rm -f "$TORCH_OUT"' EXIT
echo "== machine: $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== torch written-out attention (/usr/bin/python3, torch.set_num_threads($THREADS))"
/usr/bin/python3 bench/sdpa/torch_attention_bench.py --T "$TS" --modes "$MODES" --threads "$THREADS" --out "$TORCH_OUT"
echo "== loom sdpa (LOOM_NUM_THREADS=$THREADS)"
LOOM_NUM_THREADS="$THREADS" "$BIN" --T="$TS" --modes="$MODES" --torch="$TORCH_OUT"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
