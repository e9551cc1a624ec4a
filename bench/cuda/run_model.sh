#!/bin/bash
# One model's training throughput on the GPU machine, Loom against PyTorch at
# its best, in one device call: per round, train_torch.py in each PyTorch mode
# (torch.compile's default mode, and compile-ro: reduce-overhead with the
# update compiled), then train_bench with that round's results (ratios and the
# loss check); two rounds; then the best of each (model_summary.py) and Loom's
# ratio to the faster PyTorch mode. After bench/cuda/stage.sh:
#   device tool: run(command="bash bench/cuda/run_model.sh llama-1b", carry=[".device/gpu"])
#
#   run_model.sh [--rounds=2] [--steps=20] [--warmup=5] [--modes="compile compile-ro"]
#                [--sdpa=default|cudnn|flash] [--budget=540] [--loom-flags="--no-graph ..."]
#                [--activation-checkpointing=none|blocks] [--text=PATH] PRESET [--n_layer=N --batch=N ...]
# PRESET: gpt2-124m, gpt2-350m, llama-124m, llama-350m, llama-1b
# (bench/cuda/train_config.h). Shape flags after it go to both sides
# (train_torch.py --init and train_bench). --modes may add eager.
# --budget: seconds this script may take (the device call's 600 s less the
# staging's unpacking and a margin). Every run is given at most what is left
# (timeout), and a run whose previous round took longer than what is left is
# skipped with a "SKIP" line instead of being cut short; the summary uses
# the rounds that ran. --activation-checkpointing=blocks: both sides
# recompute each block in the backward (PyTorch's torch.utils.checkpoint per
# block, Loom's block checkpointing): the recipe of the capacity comparison.
# --text=PATH: the batches are byte windows of this file, or of a folder's
# files in name order (strfile indexes, *.dat, and the *.u8 links left out:
# the layout of the staged fortunes corpus, .device/gpu/data/fortunes, which
# run_capacity.sh reads the same way), not uniform random tokens, so that
# the loss falls and a spike means a fault rather than chaos.
# Logs and results go to $OUT.
set -u
rounds=2 steps=20 warm=5 modes="compile compile-ro" sdpa=default budget=540 loom_flags="" ckpt=none text=""
usage() { echo "usage: run_model.sh [--rounds=N] [--steps=N] [--warmup=N] [--modes=LIST] [--sdpa=S] [--budget=S] [--loom-flags=F] [--activation-checkpointing=none|blocks] [--text=PATH] PRESET [shape flags]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds=*) rounds=${1#*=} ;; --steps=*) steps=${1#*=} ;; --warmup=*) warm=${1#*=} ;;
    --modes=*) modes=${1#*=} ;; --sdpa=*) sdpa=${1#*=} ;; --budget=*) budget=${1#*=} ;;
    --loom-flags=*) loom_flags=${1#*=} ;; --text=*) text=${1#*=} ;;
    --activation-checkpointing=none|--activation-checkpointing=blocks) ckpt=${1#*=} ;;
    --*) echo "run_model.sh: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || { echo "run_model.sh: PRESET is required" >&2; usage; }
preset=$1; shift
shape=("$@")
for v in "$rounds" "$steps" "$warm" "$budget"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "run_model.sh: --rounds, --steps, --warmup and --budget take integers (got '$v')" >&2; exit 2; }
done
. "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
data=/tmp/loom_model_data_$preset
status=0
echo "== $preset ${shape[*]}: weights + $((steps + warm)) batches"
rm -rf "$data"
if [ -d "$text" ]; then
  corpus="$O/corpus_$preset.txt"
  find "$text" -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z | xargs -0 cat > "$corpus"
  text=$corpus
fi
$PY bench/cuda/train_torch.py --init "$data" --preset "$preset" "${shape[@]}" --steps "$steps" --warmup "$warm" \
  ${text:+--text "$text"} || exit 2
declare -A took=()
loom_logs="" torch_all=""
# run NAME CMD...: runs CMD under the budget (ran=1), or skips it (ran=0) when
# its previous round took longer than what is left. Its exit status is CMD's;
# its own lines go to fd 3, the script's stdout (CMD's output is redirected).
exec 3>&1
run() {
  local name=$1; shift
  local rest; rest=$(left)
  ran=0
  if [ "$rest" -le 5 ] || { [ -n "${took[$name]:-}" ] && [ "${took[$name]}" -ge "$rest" ]; }; then
    echo "SKIP $name: ${rest}s left of --budget=$budget (it took ${took[$name]:-?}s before)" >&3
    return 0
  fi
  local s rc; s=$(date +%s)
  timeout "$rest" "$@"
  rc=$?
  ran=1
  took[$name]=$(($(date +%s) - s))
  echo "($name: ${took[$name]}s, exit $rc, $(left)s left)" >&3
  return $rc
}
for r in $(seq 1 "$rounds"); do
  results=""
  for mode in $modes; do
    base="$O/model_${preset}_torch_${mode}_r$r"
    echo "== round $r/$rounds: torch $mode (sdpa $sdpa)"
    run "torch_$mode" $PY bench/cuda/train_torch.py --data "$data" --mode "$mode" --sdpa "$sdpa" --steps "$steps" \
      --warmup "$warm" --activation-checkpointing "$ckpt" --out "$base.json" >"$base.out" 2>"$base.err"
    [ "$ran" = 1 ] || continue
    cut -c1-300 "$base.out"
    grep 'FALLBACK' "$base.err"  # a part that did not compile as asked, said out loud
    if [ -s "$base.json" ]; then results="$results,$base.json"; else tail -5 "$base.err"; status=1; fi
  done
  torch_all="$torch_all$results"
  log="$O/model_${preset}_loom_r$r.txt"
  echo "== round $r/$rounds: loom"
  # shellcheck disable=SC2086
  run loom "$D/bin/train_bench" --preset="$preset" "${shape[@]}" --data="$data" --torch="${results#,}" \
    --steps="$steps" --warmup="$warm" --activation-checkpointing="$ckpt" $loom_flags >"$log" 2>&1
  rc=$?
  [ "$ran" = 1 ] || continue
  [ "$rc" = 0 ] || status=1
  grep -Ev '^losses:' "$log" | cut -c1-300
  loom_logs="$loom_logs,$log"
done
echo "== $preset: summary"
$PY bench/cuda/model_summary.py --loom "${loom_logs#,}" --torch "${torch_all#,}" || status=1
echo "run_model $preset: $(($(date +%s) - t0))s, $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
