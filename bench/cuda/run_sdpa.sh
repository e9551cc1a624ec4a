#!/bin/bash
# Flash attention on the GPU machine, after bench/cuda/stage.sh staged the
# binaries and libraries into .device/gpu (LOOM_DEVICE_DIR picks another):
#   device tool: run(command="bash bench/cuda/run_sdpa.sh", carry=[".device/gpu"])
# Runs the attention checks (fp64 reference, every kernel variant), then by
# SDPA_MODE:
#   bench (default): Loom's SDPA benchmark (flash defaults, and the dispatcher
#     when the binary has it), PyTorch's SDPA backends at the same shapes, then
#     the side-by-side table with ratios; SDPA_ROUNDS (2) rounds alternating;
#   sweep: every flash kernel variant timed per shape (sdpa_bench --sweep),
#     then the defaults' benchmark (no PyTorch);
#   all: sweep, then bench;
#   variants: Loom's kernel pairs against cuDNN's fused attention, each in
#     its own sdpa_bench process, SDPA_ROUNDS rounds alternating. SDPA_PAIRS
#     lists the pairs as FWD,BWD variant ids (flash_variants.h; default
#     "13,9 13,11 13,12 14,12": the default forward (warp-specialised; at
#     D 128 variant 13 runs with two consumers) with the default backward
#     (stored dS, wgmma dK/dV pass), with the warp-specialised dK/dV pass, and
#     with the one-pass backward; then the three-stage forward). No PyTorch.
# SDPA_ITERS (40): timed iterations per loop, the same for both sides.
# Logs go to $OUT. Also called by run_all.sh.
set -u
MODE=${SDPA_MODE:-bench}
. "$(dirname "$0")/device_env.sh"  # D, O, PY, LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader 2>&1 | head -2
status=0
if [ "${SDPA_CHECKS:-1}" != 0 ]; then  # run_all.sh ran them already (run_checks.sh)
  echo "== flash attention checks (fp64 reference)"
  timeout 120 "$D/bin/attention_check" 2>&1 | tee "$O/attention_check.txt"  # as run_checks.sh
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$MODE" = sweep ] || [ "$MODE" = all ]; then
  echo "== SDPA bf16: every flash variant"
  timeout 60 "$D/bin/sdpa_bench" --sweep --iters=${SDPA_ITERS:-10} 2>&1 | tee "$O/sdpa_sweep.txt" | grep -E "BEST|FAIL|usage|error"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "$MODE" = variants ]; then
  for round in $(seq 1 "${SDPA_ROUNDS:-2}"); do
    for fb in ${SDPA_PAIRS:-13,9 13,11 13,12 14,12}; do
      f=${fb%,*} b=${fb#*,}
      echo "== SDPA bf16 round $round: flash fwd $f, bwd $b, and cuDNN"
      timeout 90 "$D/bin/sdpa_bench" --fwd="$f" --bwd="$b" --only=loom_flash,loom_cudnn --iters=${SDPA_ITERS:-40} \
        > "$O/sdpa_variants_r${round}_f${f}_b${b}.txt" 2>&1 || status=1
      grep -E "^RESULT" "$O/sdpa_variants_r${round}_f${f}_b${b}.txt" |
        sed -E 's/ (graph_fwdbwd_ms|host_ms|check_o_rel|check_lse_abs|grads_finite)=[^ ]*//g; s/ kernels=.*//'
    done
  done
  grep -q CHECK_FAILED "$O"/sdpa_variants_*.txt && status=1
  echo "run_sdpa: $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
  exit $status
fi
# Loom and PyTorch alternate for SDPA_ROUNDS rounds (default 2); the last
# table takes each side's best figure per case over the rounds (the same rule
# for both: the card's clocks drift under this load between calls).
rounds=${SDPA_ROUNDS:-2}
[ "$MODE" = sweep ] && rounds=1
: > "$O/sdpa_loom.txt"; : > "$O/sdpa_torch_all.txt"
for round in $(seq 1 "$rounds"); do
  echo "== SDPA bf16 round $round/$rounds: Loom flash attention (defaults) ${SDPA_BENCH_ARGS:-}"
  timeout 240 "$D/bin/sdpa_bench" --iters=${SDPA_ITERS:-40} ${SDPA_BENCH_ARGS:-} 2>&1 | tee "$O/sdpa_loom_r$round.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  cat "$O/sdpa_loom_r$round.txt" >> "$O/sdpa_loom.txt"
  if [ "$MODE" != sweep ]; then
    echo "== SDPA bf16 round $round/$rounds: PyTorch backends, and the ratios (best of rounds 1..$round)"
    PYTHONUNBUFFERED=1 timeout 240 $PY bench/cuda/torch_sdpa.py --loom="$O/sdpa_loom.txt" --prev="$O/sdpa_torch_all.txt" \
      --iters=${SDPA_ITERS:-40} ${TORCH_SDPA_ARGS:-} 2>&1 | tee "$O/sdpa_torch.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    cat "$O/sdpa_torch.txt" >> "$O/sdpa_torch_all.txt"
  fi
done
grep -q CHECK_FAILED "$O"/sdpa_*.txt && status=1
echo "run_sdpa: $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
