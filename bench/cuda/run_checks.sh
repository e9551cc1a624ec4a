#!/bin/bash
# Every CUDA correctness check on the GPU machine, in one call, after
# bench/cuda/stage.sh staged the binaries here:
#   device tool: run(command="bash bench/cuda/run_checks.sh", carry=[".device/gpu"])
# Each check compares CUDA results with an fp64 CPU reference on fresh random
# inputs (outputs poisoned first). Prints each binary's own table (full logs
# in $OUT), then one line per binary and "checks: N passed, N failed" (binaries),
# with the kernel source hash the tables name. Exit status 1 if any failed.
# Here (no GPU) `bazel test` builds the same checks and skips them with the reason.
# CHECKS picks groups (default all three), so that each call fits the device
# tool's 600 s: kernels (kernels, executor, ONNX, one-rank GPU resume,
# cuda:gloo ops), restart (several cuda ranks: kill and restart, resume
# across devices), parity (the parallel trainer against one rank).
# JOBS=N (default 1) runs up to N checks at once, each its own process (none
# is timed; on 2026-12-05 every group side by side took 149 s of one call),
# and prints their tails in the order above once all have ended.
set -u
groups=" ${CHECKS:-kernels restart parity} "
want() { [[ "$groups" == *" $1 "* ]]; }
. "$(dirname "$0")/device_env.sh"
echo "== device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
passed=0; failed=0; summary=""; jobs=${JOBS:-1}; started=()
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run_checks.sh: JOBS takes a positive integer (got '$jobs')" >&2; exit 2; }
report() {  # name, lines of its output to show: its tail and verdict, from $O/NAME.txt and .rc
  local name=$1 show=$2 rc
  rc=$(cat "$O/$name.rc")
  echo "== $name"
  tail -n "$show" "$O/$name.txt"
  if [ "$rc" = 0 ]; then passed=$((passed + 1)); summary="$summary\n  PASS  $name"
  else failed=$((failed + 1)); summary="$summary\n  FAIL  $name (exit $rc; log $O/$name.txt)"; fi
}
check() {  # name, time limit (s), lines of its output to show, command...
  local name=$1 limit=$2 show=$3; shift 3
  if [ "$jobs" = 1 ]; then
    timeout "$limit" "$@" > "$O/$name.txt" 2>&1
    echo $? > "$O/$name.rc"
    report "$name" "$show"
    return
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  ( timeout "$limit" "$@" > "$O/$name.txt" 2>&1; echo $? > "$O/$name.rc" ) &
  started+=("$name $show")
}
if want kernels; then
check gpu_check 120 200 "$D/bin/gpu_check" --progress                         # GEMM epilogues, layernorm bwd, column sums, grad norm, CE, embedding bwd
# Its bad-argument cases; its other test runs gpu_check's checks again under gtest.
check cuda_kernels_test 60 3 "$D/bin/cuda_kernels_test" --gtest_filter=-CudaKernels.AllChecksPassOrSkip
check caching_allocator_test 120 3 "$D/bin/caching_allocator_test"   # allocator and streams on real memory
check wgmma_check 60 12 "$D/bin/wgmma_check"                        # warpgroup products and layouts the wgmma forward uses
check attention_check 120 80 "$D/bin/attention_check"                # flash, math, cuDNN, masks, dropout, varlen, dispatcher
check pointwise_gpu_check 120 6 "$D/bin/pointwise_gpu_check"         # generated pointwise kernels
check rowwise_gpu_check 120 6 "$D/bin/rowwise_gpu_check"             # generated layernorm (+ adds), AdamW
check cuda_executor_gpu_check 300 30 "$D/bin/cuda_executor_gpu_check"  # whole steps vs the CPU executor
# The imported nanoGPTs (stage.sh exports them) on cuda, f32 and bf16, vs the CPU.
check byom_cuda_test 300 16 "$D/bin/byom_cuda_test" --models="$D/data/byom"
# GPU checkpoints: save, resume on cuda (bitwise where deterministic) and on the cpu.
check cuda_resume_test 300 22 "$D/bin/cuda_resume_test"
# cuda:gloo with 2 and 4 ranks (processes) sharing the GPU, every staged op.
check cuda_gloo_gpu_test 300 6 "$D/bin/cuda_gloo_gpu_test"
# Compile time, GPT-2 124M: the build and two steps with an empty kernel
# cache, then again warm in the same process (the measurement: run_compile.sh).
check compile_bench 120 40 "$D/bin/compile_bench" --preset=gpt2-124m --warm=1
fi
if want restart; then
# The tests' jobs read Debian's fortunes; the GPU machine has the staged copy.
if [ ! -e /usr/share/games/fortunes ] && [ -d "$D/data/fortunes" ]; then
  mkdir -p /usr/share/games && ln -s "$(cd "$D/data/fortunes" && pwd)" /usr/share/games/fortunes
fi
# 4 cuda ranks sharing the GPU (deterministic), rank 1 killed at a random
# moment after the first checkpoint: the restarted job ends bitwise equal.
# Each test runs `runtime/loom` from its own working directory.
for w in fault resume; do mkdir -p "$O/$w/runtime" && ln -sf "$D/bin/loom" "$O/$w/runtime/loom"; done
check fault_test_cuda 260 12 bash -c "cd '$O/fault' && '$D/bin/fault_test' --gtest_filter='*Cuda*'"
# A cuda dp=2 checkpoint resumed on the CPU at tp=2, and the reverse.
check resume_across_devices 260 12 bash -c "cd '$O/resume' && '$D/bin/resume_test' --gtest_filter='ResumeAcrossDevices.*'"
fi
if want parity; then
# The parallel trainer on cuda: dp2, tp2, tp2xdp2, tp2 + SP, ZeRO-1/2/3 ranks sharing the
# GPU (cuda:gloo) vs the 1-rank CUDA run, gpt and llama, f32 and bf16, 50 steps
# (every loss in the log; it stops itself after 560 s).
check parallel_cuda_gpu_check 580 32 "$D/bin/parallel_cuda_gpu_check"
fi
wait
for s in "${started[@]}"; do report ${s% *} ${s##* }; done
echo "== summary"
printf "%b\n" "$summary"
echo "checks: $passed passed, $failed failed"
[ "$failed" = 0 ]
