#!/bin/bash
# Runs every CUDA check and benchmark on the GPU machine in one call, from the
# repository root, after bench/cuda/stage.sh staged .device/ here:
#   device tool: run(command="bash bench/cuda/run_all.sh", carry=[".device/gpu"])
# Prints: the device, the kernel check table (with the kernel source hash), the
# caching-allocator test on real memory, and the bf16 8192^3 GEMM of Loom and
# torch.matmul side by side with the ratio (must reach 0.95). Logs go to $OUT.
set -u
. "$(dirname "$0")/device_env.sh"
status=0
echo "== device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "== kernel checks"
"$D/bin/gpu_check" 2>&1 | tee "$O/gpu_check.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== caching allocator and runtime tests on the GPU"
"$D/bin/caching_allocator_test" 2>&1 | tee "$O/allocator_test.txt" | grep -E "cuda backend|OK|FAIL|SKIP|PASSED" 
[ "${PIPESTATUS[0]}" = 0 ] || status=1
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
echo "== flash attention checks and SDPA (run_sdpa.sh)"
LOOM_DEVICE_DIR=$D bash bench/cuda/run_sdpa.sh || status=1
echo "== pointwise codegen checks (NVRTC kernels vs the f64 registry reference)"
"$D/bin/pointwise_gpu_check" 2>&1 | tee "$O/pointwise_gpu_check.txt" | tail -8
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== generated row-wise kernels (layernorm, cross-entropy, AdamW) vs the f64 reference, and their timings"
"$D/bin/rowwise_gpu_check" 2>&1 | tee "$O/rowwise_gpu_check.txt" | tail -20
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== CUDA executor vs CPU executor, gpt-small, 20 steps (f32, bf16, graph/eager)"
timeout 300 "$D/bin/cuda_executor_gpu_check" 2>&1 | tee "$O/lowering_check.txt" | tail -8
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== model parity vs the GPU machine's PyTorch on CUDA (fp32 and bf16, 50 steps)"
timeout 400 "$D/bin/gpt_cuda_parity" --python="$PY" 2>&1 | tee "$O/gpt_cuda_parity.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== GPT-2 124M training: PyTorch eager, torch.compile, Loom (run_gpt2.sh)"
LOOM_DEVICE_DIR=$D bash bench/cuda/run_gpt2.sh || status=1
echo "== loom train examples/gpt-cuda.yaml (device: cuda, bf16), end to end"
LOOM_DEVICE_DIR=$D bash bench/cuda/run_train.sh || status=1
echo "run_all: $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
