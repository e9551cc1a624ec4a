#!/bin/bash
# Before/after comparison of two staged trees on the GPU machine, in one call,
# with the card shared fairly: the two trees' binaries alternate round by
# round, and each figure is the best over the rounds (docs/perf.md's protocol).
#   here:  LOOM_DEVICE_DIR=.device/gpu-base bash bench/cuda/stage.sh  (tree A, e.g. before)
#          LOOM_DEVICE_DIR=.device/gpu bash bench/cuda/stage.sh       (tree B, e.g. after)
#   there: device tool run(command="AB_PARTS=sdpa bash bench/cuda/ab.sh", carry=[".device/gpu-base", ".device/gpu"])
# A's lib.tar.xz may be left out of the carry (the system libraries of both
# trees are the same): B's is used for both.
# AB_PARTS picks ("checks sdpa gpt2", default all):
#   checks: run_checks.sh on tree B (every kernel and executor check);
#   sdpa:   AB_ROUNDS rounds of sdpa_bench A, sdpa_bench B, PyTorch's backends;
#           then the table of each tree against PyTorch's best backend;
#   gpt2:   PyTorch (GPT2_TORCH modes, once each), then AB_ROUNDS rounds of
#           training the AB_PRESET model (train_config.h's presets; default
#           gpt2-124m, e.g. llama-124m), tree A, tree B, on the same weights
#           and batches (each tree's train_bench, or gpt2_bench in a tree
#           older than it, which trains GPT-2 124M only).
# Prints, last, one line per figure with A, B and B / A. Logs go to $OUT.
set -u
A=${AB_A:-.device/gpu-base}
B=${AB_B:-.device/gpu}
rounds=${AB_ROUNDS:-3}
parts=" ${AB_PARTS:-checks sdpa gpt2} "
want() { [[ "$parts" == *" $1 "* ]]; }
[ -f "$A/lib.tar.xz" ] || cp "$B/lib.tar.xz" "$A/lib.tar.xz"
LOOM_DEVICE_DIR=$B . "$(dirname "$0")/device_env.sh"  # O, PY, LD_LIBRARY_PATH (B's libraries)
unpack() {  # unpack SIDE DIR: SIDE's binaries into DIR/bin
  rm -rf "$2" && mkdir -p "$2" && tar -C "$2" -xJf "$1/bin.tar.xz"
}
unpack "$A" /tmp/ab_A
unpack "$B" /tmp/ab_B
status=0
summary=""
if want checks; then
  LOOM_DEVICE_DIR=$B bash "$(dirname "$0")/run_checks.sh" || status=1
fi
if want sdpa; then
  : > "$O/ab_sdpa_A.txt"; : > "$O/ab_sdpa_B.txt"; : > "$O/ab_sdpa_torch.txt"
  args="--iters=40 --dispatch --only=loom_flash,loom_sdpa,loom_cudnn"
  for r in $(seq 1 "$rounds"); do
    for side in A B; do
      echo "== SDPA round $r/$rounds: tree $side"
      timeout 200 /tmp/ab_$side/bin/sdpa_bench $args >> "$O/ab_sdpa_$side.txt" 2>&1 || status=1
    done
    echo "== SDPA round $r/$rounds: PyTorch"
    PYTHONUNBUFFERED=1 timeout 200 $PY bench/cuda/torch_sdpa.py --iters=40 --no-math \
      > "$O/ab_sdpa_torch_r$r.txt" 2>&1 || status=1
    cat "$O/ab_sdpa_torch_r$r.txt" >> "$O/ab_sdpa_torch.txt"
  done
  for side in A B; do
    echo "== SDPA: tree $side against PyTorch (best of $rounds rounds each)"
    $PY bench/cuda/torch_sdpa.py --loom="$O/ab_sdpa_$side.txt" --prev="$O/ab_sdpa_torch.txt" --table-only 2>&1 |
      tee "$O/ab_sdpa_table_$side.txt"
  done
  grep -q CHECK_FAILED "$O"/ab_sdpa_*.txt && status=1
  summary+=$($PY bench/cuda/ab_compare.py sdpa "$O/ab_sdpa_A.txt" "$O/ab_sdpa_B.txt")$'\n'
fi
if want gpt2; then
  steps=${GPT2_STEPS:-20}; warm=${GPT2_WARMUP:-5}
  preset=${AB_PRESET:-gpt2-124m}
  data=/tmp/loom_${preset}_data
  $PY bench/cuda/train_torch.py --init "$data" --preset "$preset" --steps "$steps" --warmup "$warm" || exit 1
  results=""
  for mode in ${GPT2_TORCH:-compile compile-ro}; do
    echo "== $preset PyTorch $mode (sdpa cudnn)"
    timeout "${GPT2_TORCH_TIMEOUT:-300}" $PY bench/cuda/train_torch.py --data "$data" --mode "$mode" --sdpa cudnn \
      --steps "$steps" --warmup "$warm" --out "$O/ab_torch_$mode.json" 2>"$O/ab_torch_$mode.err" | cut -c1-300
    if [ -s "$O/ab_torch_$mode.json" ]; then results="$results,$O/ab_torch_$mode.json"; else tail -5 "$O/ab_torch_$mode.err"; fi
  done
  : > "$O/ab_gpt2_A.txt"; : > "$O/ab_gpt2_B.txt"
  for r in $(seq 1 "$rounds"); do
    for side in A B; do
      echo "== $preset round $r/$rounds: tree $side"
      bench=/tmp/ab_$side/bin/train_bench
      [ -x "$bench" ] || bench=/tmp/ab_$side/bin/gpt2_bench  # a tree from before train_bench
      preset_flag=--preset="$preset"
      [ "${bench##*/}" = gpt2_bench ] && preset_flag=""
      timeout 240 "$bench" $preset_flag --data="$data" --torch="${results#,}" --steps="$steps" \
        --warmup="$warm" 2>&1 | tee -a "$O/ab_gpt2_$side.txt" | grep -E "tokens/s|ratio|CHECK" | cut -c1-200
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
    done
  done
  summary+=$($PY bench/cuda/ab_compare.py gpt2 "$O/ab_gpt2_A.txt" "$O/ab_gpt2_B.txt")$'\n'
fi
echo "== A/B summary (A = $A, B = $B; best of $rounds rounds each)"
printf "%s" "$summary"
echo "ab: $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
