#!/bin/bash
# Every CUDA check and benchmark on the GPU machine, after bench/cuda/stage.sh:
#   device tool: run(command="bash bench/cuda/run_all.sh", carry=[".device/gpu"])
# 1. run_checks.sh: every kernel and executor check against fp64 references.
# 2. Benchmarks, each side by side with the GPU machine's PyTorch in the same
#    call: memory-bound kernels, bf16 GEMM 8192^3 (must reach 0.95x
#    torch.matmul), SDPA (run_sdpa.sh), GPT-2 124M training (run_gpt2.sh).
# 3. Model parity against torch on CUDA, and `loom train` / `loom run` of a
#    device: cuda job end to end (run_train.sh).
# 4. The built-in GPT-2 124M written in PyTorch, exported, imported and
#    trained against the built-in family (run_import.sh; must reach 0.95).
# Together they take longer than one device call (600 s): RUN_PARTS picks
# ("checks gemm sdpa gpt2 parity train import", the default, is all). Logs go to $OUT.
set -u
. "$(dirname "$0")/device_env.sh"
parts=" ${RUN_PARTS:-checks gemm sdpa gpt2 parity train import} "
want() { [[ "$parts" == *" $1 "* ]]; }
status=0
if want checks; then
  bash "$(dirname "$0")/run_checks.sh" || status=1
fi
if want gemm; then
  echo "== memory-bound kernels at GPT-2 124M shapes (B16 T1024, bf16)"
  "$D/bin/kernel_bench" 2>&1 | tee "$O/kernel_bench.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  echo "== bf16 GEMM 8192^3: Loom (cuBLASLt) vs torch.matmul, alternating, best of 2 each"
  best_l=0; best_t=0
  for round in 1 2; do
    "$D/bin/gemm_bench" 2>&1 | tee -a "$O/gemm.txt"
    l=$(grep -o 'loom_tflops=[0-9.]*' "$O/gemm.txt" | tail -1 | cut -d= -f2)
    PYTHONUNBUFFERED=1 $PY bench/cuda/torch_gemm.py 2>&1 | tee -a "$O/gemm.txt"
    t=$(grep -o 'torch_tflops=[0-9.]*' "$O/gemm.txt" | tail -1 | cut -d= -f2)
    best_l=$($PY -c "print(max(float('${l:-0}'), $best_l))")
    best_t=$($PY -c "print(max(float('${t:-0}'), $best_t))")
  done
  "$D/bin/gemm_bench" --no-autotune --iters=30 2>&1 | tee -a "$O/gemm.txt"
  ratio=$($PY -c "print(f'{$best_l / $best_t:.3f}' if $best_t > 0 else 'nan')")
  ok=$($PY -c "print('PASS' if $best_t > 0 and $best_l / $best_t >= 0.95 else 'FAIL')")
  [ "$ok" = PASS ] || status=1
  echo "GEMM bf16 8192^3: loom ${best_l} TFLOP/s, torch ${best_t} TFLOP/s, ratio ${ratio} (must reach 0.95): ${ok}" | tee -a "$O/gemm.txt"
fi
if want sdpa; then
  echo "== SDPA: Loom's flash and dispatcher vs PyTorch's backends (run_sdpa.sh)"
  want checks && export SDPA_CHECKS=0
  LOOM_DEVICE_DIR=$D SDPA_BENCH_ARGS=${SDPA_BENCH_ARGS:---dispatch} bash bench/cuda/run_sdpa.sh || status=1
fi
if want gpt2; then
  echo "== GPT-2 124M training: PyTorch eager, torch.compile, Loom (run_gpt2.sh)"
  LOOM_DEVICE_DIR=$D bash bench/cuda/run_gpt2.sh || status=1
fi
if want parity; then
  echo "== model parity vs the GPU machine's PyTorch on CUDA (fp32 and bf16, 50 steps)"
  timeout 400 "$D/bin/gpt_cuda_parity" --python="$PY" 2>&1 | tee "$O/gpt_cuda_parity.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if want train; then
  echo "== loom train / loom run, device: cuda, end to end (run_train.sh)"
  LOOM_DEVICE_DIR=$D bash bench/cuda/run_train.sh || status=1
fi
if want import; then
  echo "== imported GPT-2 124M vs the built-in gpt family (run_import.sh)"
  LOOM_DEVICE_DIR=$D bash bench/cuda/run_import.sh || status=1
fi
echo "run_all ($parts): $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
