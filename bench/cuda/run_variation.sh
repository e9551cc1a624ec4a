#!/bin/bash
# Loom's run-to-run variation on the GPU machine, per source of it: trains one
# model several times with each variant and prints how far each variant's runs
# end up from each other (the largest relative loss difference over the
# steps, the measure train_bench's loss check applies against PyTorch).
# Variants (each adds train_bench flags; what stays is nondeterministic):
#   plain      the defaults (embedding backward by atomics, timed attention
#              choice, timed cuBLASLt algorithms)
#   sortemb    --embedding-backward=sorted: the embedding gradient without atomics
#   flash      --attention=flash: Loom's flash attention, no atomics in its backward
#   flashsort  both; with the timed GEMM algorithms read back from the kernel
#              cache's choices.tsv, its runs should repeat exactly
#   det        --deterministic
# After bench/cuda/stage.sh:
#   device tool: run(command="bash bench/cuda/run_variation.sh llama-124m --n_layer=16 --n_head=32 \
#       --n_kv_head=32 --d_model=4096 --ffn=11008 --batch=1", carry=[".device/gpu"])
#
#   run_variation.sh [--runs=2] [--steps=10] [--warmup=3] [--budget=540]
#                    [--variants="plain sortemb flash flashsort"] [--loom-flags="--residual=f32 ..."]
#                    [--activation-checkpointing=none|blocks] PRESET [shape flags]
# The weights and batches come from train_torch.py --init (PyTorch's
# initialisation, as run_model.sh). Runs that would not fit in what is left of
# --budget are skipped with a SKIP line. Logs go to $OUT.
set -u
runs=2 steps=10 warm=3 budget=540 variants="plain sortemb flash flashsort" loom_flags="" ckpt=none
usage() {
  echo "usage: run_variation.sh [--runs=N] [--steps=N] [--warmup=N] [--budget=S] [--variants=LIST]" \
    "[--loom-flags=F] [--activation-checkpointing=none|blocks] PRESET [shape flags]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --runs=*) runs=${1#*=} ;; --steps=*) steps=${1#*=} ;; --warmup=*) warm=${1#*=} ;;
    --budget=*) budget=${1#*=} ;; --variants=*) variants=${1#*=} ;; --loom-flags=*) loom_flags=${1#*=} ;;
    --activation-checkpointing=none|--activation-checkpointing=blocks) ckpt=${1#*=} ;;
    --*) echo "run_variation.sh: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || { echo "run_variation.sh: PRESET is required" >&2; usage; }
preset=$1; shift
shape=("$@")
for v in "$runs" "$steps" "$warm" "$budget"; do
  [[ "$v" =~ ^[0-9]+$ ]] ||
    { echo "run_variation.sh: --runs, --steps, --warmup and --budget take integers (got '$v')" >&2; exit 2; }
done
[ "$runs" -ge 2 ] || { echo "run_variation.sh: --runs must be at least 2 (got $runs)" >&2; exit 2; }
flags_of() {
  case "$1" in
    plain) echo "" ;; sortemb) echo "--embedding-backward=sorted" ;; flash) echo "--attention=flash" ;;
    flashsort) echo "--attention=flash --embedding-backward=sorted" ;; det) echo "--deterministic" ;;
    *) return 1 ;;
  esac
}
for v in $variants; do
  flags_of "$v" >/dev/null ||
    { echo "run_variation.sh: --variants: unknown variant '$v' (plain, sortemb, flash, flashsort, det)" >&2; exit 2; }
done
. "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
data=/tmp/loom_variation_data_$preset
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== $preset ${shape[*]}: weights + $((steps + warm)) batches"
rm -rf "$data"
$PY bench/cuda/train_torch.py --init "$data" --preset "$preset" "${shape[@]}" --steps "$steps" --warmup "$warm" || exit 2
status=0 took=0
for v in $variants; do
  logs=()
  for i in $(seq 1 "$runs"); do
    rest=$(left)
    if [ "$rest" -le 5 ] || [ "$took" -ge "$rest" ]; then
      echo "SKIP $v run $i: ${rest}s left of --budget=$budget (a run took ${took}s)"
      continue
    fi
    log="$O/variation_${preset}_${v}_$i.txt"
    s=$(date +%s)
    # shellcheck disable=SC2046,SC2086
    timeout "$rest" "$D/bin/train_bench" --preset="$preset" "${shape[@]}" --data="$data" --steps="$steps" \
      --warmup="$warm" --activation-checkpointing="$ckpt" $loom_flags $(flags_of "$v") >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - s))
    echo "== $v run $i: exit $rc, ${took}s"
    [ "$rc" = 0 ] || { status=1; tail -3 "$log"; continue; }
    grep -E '^RESULT' "$log" | cut -c1-200
    logs+=("$log")
  done
  [ ${#logs[@]} -ge 2 ] || continue
  # The largest relative difference, over the steps, between any two runs.
  grep -h '^losses:' "${logs[@]}" | awk -v name="$v" '
    { n[NR] = NF - 1; for (i = 2; i <= NF; i++) l[NR, i - 1] = $i }
    END {
      worst = 0
      for (a = 1; a <= NR; a++) for (b = a + 1; b <= NR; b++) for (i = 1; i <= n[a]; i++) {
        d = l[a, i] - l[b, i]; if (d < 0) d = -d
        r = l[b, i] < 0 ? -l[b, i] : l[b, i]
        if (r > 0 && d / r > worst) worst = d / r
      }
      printf "SPREAD %s: %d runs, max rel loss diff %.3e%s\n", name, NR, worst, worst == 0 ? " (the same printed losses)" : ""
    }'
done
echo "run_variation $preset: $(($(date +%s) - t0))s, $([ $status = 0 ] && echo ALL RAN || echo SOME FAILED)"
exit $status
