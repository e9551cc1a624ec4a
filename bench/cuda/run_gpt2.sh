#!/bin/bash
# GPT-2 124M training on the GPU machine: PyTorch eager and torch.compile
# (bench/cuda/train_torch.py), then Loom (train_bench --preset=gpt2-124m) on
# the same weights and batches, with the ratios and the loss check, each run
# once (run_model.sh alternates them, best of 2, for any preset). After
# bench/cuda/stage.sh:
#   device tool: run(command="bash bench/cuda/run_gpt2.sh", carry=[".device/gpu"])
# PyTorch runs in its best modes (train_torch.py): torch.compile's default mode
# (the model; the fused AdamW eagerly) and compile-ro (mode="reduce-overhead":
# the model and the clip + AdamW update compiled, CUDA graphs); train_bench
# prints Loom's ratio to each and to the faster. A mode that cannot compile
# a part falls back and says so (FALLBACK lines; "_fallback" in its name).
# Env: GPT2_STEPS (20), GPT2_WARMUP (5), GPT2_TORCH ("eager compile compile-ro"),
#      GPT2_TORCH_TIMEOUT (s per PyTorch run, 300),
#      GPT2_LOOM_FLAGS (extra train_bench flags, e.g. --no-graph, --attention=flash).
set -u
. "$(dirname "$0")/device_env.sh"
steps=${GPT2_STEPS:-20}; warm=${GPT2_WARMUP:-5}
data=/tmp/loom_gpt2_data
status=0
echo "== data: weights + $((steps + warm)) batches"
$PY bench/cuda/train_torch.py --init "$data" --preset gpt2-124m --steps "$steps" --warmup "$warm" || exit 1
results=""
# Each entry is MODE or MODE:SDPA (train_torch.py --mode: eager, compile,
# compile-ro; --sdpa: default, cudnn, flash).
for entry in ${GPT2_TORCH:-eager compile compile-ro}; do
  mode=${entry%%:*}; sdpa=default; [ "$entry" != "$mode" ] && sdpa=${entry#*:}
  tag=${mode}_${sdpa}
  echo "== torch $mode (sdpa $sdpa)"
  timeout "${GPT2_TORCH_TIMEOUT:-300}" $PY bench/cuda/train_torch.py --data "$data" --mode "$mode" --sdpa "$sdpa" --steps "$steps" \
    --warmup "$warm" --out "$O/torch_$tag.json" 2>"$O/torch_$tag.err" | cut -c1-300
  grep 'FALLBACK' "$O/torch_$tag.err"  # a part that did not compile as asked, said out loud
  [ -s "$O/torch_$tag.json" ] && results="$results,$O/torch_$tag.json" || { tail -5 "$O/torch_$tag.err"; status=1; }
done
echo "== loom"
timeout 240 "$D/bin/train_bench" --preset=gpt2-124m --data="$data" --torch="${results#,}" --steps="$steps" --warmup="$warm" \
  ${GPT2_LOOM_FLAGS:-} 2>&1 | tee "$O/loom_gpt2.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "run_gpt2: $([ $status = 0 ] && echo ALL PASS || echo SOME FAILED)"
exit $status
