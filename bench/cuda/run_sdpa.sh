#!/bin/bash
# Flash attention on the GPU machine, after bench/cuda/stage.sh staged .device/:
#   device tool: run(command="bash bench/cuda/run_sdpa.sh", carry=[".device"])
# Runs the attention checks (fp64 reference), Loom's SDPA benchmark and
# PyTorch's SDPA backends at the same shapes, then the side-by-side table with
# ratios. Logs go to $OUT. Also called by run_all.sh.
set -u
D=${LOOM_DEVICE_DIR:-.device}
O=${OUT:-/tmp/loom_cuda_out}
mkdir -p "$O"
PY=${PYTHON:-python3}
# cuBLAS/cuBLASLt (linked by the check binary) from the PyTorch environment.
NV=$($PY -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]) + "/nvidia")' 2>/dev/null)
NVLIBS=$(find "$NV" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$D/lib:${NVLIBS}${LD_LIBRARY_PATH:-}"
status=0
echo "== flash attention checks (fp64 reference)"
timeout 50 "$D/bin/attention_check" 2>&1 | tee "$O/attention_check.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== SDPA bf16: Loom flash attention"
timeout 60 "$D/bin/sdpa_bench" ${SDPA_ITERS:+--iters=$SDPA_ITERS} 2>&1 | tee "$O/sdpa_loom.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== SDPA bf16: Loom flash attention, deterministic dQ, B4 H16 T4096 D128"
timeout 30 "$D/bin/sdpa_bench" --deterministic --shape=4,16,4096,128 --iters=10 2>&1 | tee "$O/sdpa_loom_det.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== SDPA bf16: PyTorch backends, and the ratios"
PYTHONUNBUFFERED=1 timeout 100 $PY bench/cuda/torch_sdpa.py --loom="$O/sdpa_loom.txt" ${SDPA_ITERS:+--iters=$SDPA_ITERS} 2>&1 |
  tee "$O/sdpa_torch.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
grep -q CHECK_FAILED "$O/sdpa_loom.txt" "$O/sdpa_loom_det.txt" "$O/sdpa_torch.txt" && status=1
echo "run_sdpa: $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
