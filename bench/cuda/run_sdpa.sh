#!/bin/bash
# Flash attention on the GPU machine, after staging the binaries (bin/ + lib/,
# Abseil .so files included) into a git-ignored folder, .device by default
# (bench/cuda/stage.sh stages everything; LOOM_DEVICE_DIR picks another):
#   device tool: run(command="LOOM_DEVICE_DIR=.device/att2 bash bench/cuda/run_sdpa.sh", carry=[".device/att2"])
# Runs the attention checks (fp64 reference, every kernel variant), then by
# SDPA_MODE:
#   bench (default): Loom's SDPA benchmark (flash defaults, and the dispatcher
#     when the binary has it), PyTorch's SDPA backends at the same shapes, then
#     the side-by-side table with ratios;
#   sweep: every flash kernel variant timed per shape (sdpa_bench --sweep),
#     then the defaults' benchmark (no PyTorch);
#   all: sweep, then bench.
# Logs go to $OUT. Also called by run_all.sh.
set -u
D=${LOOM_DEVICE_DIR:-.device}
O=${OUT:-/tmp/loom_cuda_out}
MODE=${SDPA_MODE:-bench}
mkdir -p "$O"
PY=${PYTHON:-python3}
# cuBLAS/cuBLASLt (linked by the check binary) from the PyTorch environment.
NV=$($PY -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null)
NVLIBS=$(find "$NV" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$D/lib:${NVLIBS}${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader 2>&1 | head -2
status=0
echo "== flash attention checks (fp64 reference)"
timeout 50 "$D/bin/attention_check" 2>&1 | tee "$O/attention_check.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
if [ "$MODE" = sweep ] || [ "$MODE" = all ]; then
  echo "== SDPA bf16: every flash variant"
  timeout 60 "$D/bin/sdpa_bench" --sweep --iters=${SDPA_ITERS:-10} 2>&1 | tee "$O/sdpa_sweep.txt" | grep -E "BEST|FAIL|usage|error"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
echo "== SDPA bf16: Loom flash attention (defaults) ${SDPA_BENCH_ARGS:-}"
timeout 60 "$D/bin/sdpa_bench" ${SDPA_ITERS:+--iters=$SDPA_ITERS} ${SDPA_BENCH_ARGS:-} 2>&1 | tee "$O/sdpa_loom.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
if [ "$MODE" != sweep ]; then
  echo "== SDPA bf16: PyTorch backends, and the ratios"
  PYTHONUNBUFFERED=1 timeout 100 $PY bench/cuda/torch_sdpa.py --loom="$O/sdpa_loom.txt" ${SDPA_ITERS:+--iters=$SDPA_ITERS} ${TORCH_SDPA_ARGS:-} 2>&1 |
    tee "$O/sdpa_torch.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
grep -q CHECK_FAILED "$O"/sdpa_*.txt && status=1
echo "run_sdpa: $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
