#!/bin/bash
# Compile time of the CUDA training step on the GPU machine, after
# bench/cuda/stage.sh staged the binaries here:
#   device tool: run(command="bash bench/cuda/run_compile.sh [PRESET...]", carry=[".device/gpu"])
# For each preset (default: llama-1b gpt2-124m), compile_bench in three
# processes over one fresh kernel cache folder: the first cold (empty: every
# kernel compiled, every choice timed), then twice warm (a recompile: the
# CUBINs and timed choices of <folder>/choices.tsv read back). Each prints
# its table (compile_bench.cc); exit status 1 if any failed.
set -u
. "$(dirname "$0")/device_env.sh"
echo "== device"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(llama-1b gpt2-124m)
rc=0
for p in "${presets[@]}"; do
  dir=$(mktemp -d /tmp/loom_compile_cache.XXXXXX)
  echo "== $p cold (kernel cache $dir)"
  "$D/bin/compile_bench" --preset="$p" --kernel-cache="$dir" --warm=0 || rc=1
  for n in 1 2; do
    echo "== $p warm, process $n"
    "$D/bin/compile_bench" --preset="$p" --kernel-cache="$dir" --no-cold --warm=1 || rc=1
  done
  rm -rf "$dir"
done
exit $rc
