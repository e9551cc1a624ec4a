#!/bin/bash
# Capacity on one GPU: trains a model too large for PyTorch's standard recipe
# (f32 master weights and AdamW states, bf16 autocast, activation
# checkpointing) with Loom's lean memory (train_bench --memory=lean: bf16
# gradients and AdamW states, split weights; block checkpointing), on
# Loom's own initialisation and byte windows of the staged fortunes corpus.
# Prints the executor's device memory by kind (compile_bench, dry numbers
# from the plan), then train_bench's RESULT (tokens/s, MFU, device MiB) and
# whether the loss fell over the steps. After bench/cuda/stage.sh:
#   device tool: run(command="bash bench/cuda/run_capacity.sh", carry=[".device/gpu"])
#
#   run_capacity.sh [--steps=50] [--batch=8] [--budget=560] [--offload] [train_bench shape flags]
# --offload: the optimizer state in pinned host memory as well
# (--offload-optimizer-state), for models lean memory alone cannot hold.
# Default shape: Llama, 40 layers, C 5120, F 13824, 40 heads, 8 kv heads,
# V 32000, T 2048 (11.3B parameters); batch 8 is 16,384 tokens a step.
# Logs go to $OUT.
set -u
steps=50 batch=8 budget=560 offload=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps=*) steps=${1#*=} ;; --batch=*) batch=${1#*=} ;; --budget=*) budget=${1#*=} ;;
    --offload) offload=--offload-optimizer-state ;;
    --*=*) break ;;
    *) echo "run_capacity.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
for v in "$steps" "$batch" "$budget"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "run_capacity.sh: --steps, --batch and --budget take integers (got '$v')" >&2; exit 2; }
done
. "$(dirname "$0")/device_env.sh"
shape=(--family=llama --n_layer=40 --n_head=40 --n_kv_head=8 --d_model=5120 --ffn=13824 --seq_len=2048 --vocab=32000)
[ $# -gt 0 ] && shape=("$@")
text="$O/corpus.txt"
find "$D/data/fortunes" -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z | xargs -0 cat > "$text"
[ -s "$text" ] || { echo "run_capacity.sh: no corpus under $D/data/fortunes (bench/cuda/stage.sh copies it)" >&2; exit 1; }
echo "corpus: $(wc -c < "$text") bytes"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
start=$(date +%s)
"$D/bin/compile_bench" "${shape[@]}" --batch="$batch" --activation-checkpointing=blocks --memory=lean $offload \
  --warm=0 --dry --kernel-cache="$LOOM_KERNEL_CACHE/capacity-dry" 2>&1 | grep -E "GiB|RESULT" | tee "$O/capacity_memory.txt"
left=$((budget - ($(date +%s) - start)))
(set -o pipefail
 timeout "$left" "$D/bin/train_bench" "${shape[@]}" --batch="$batch" --text="$text" --memory=lean \
   --activation-checkpointing=blocks --warmup=2 --steps="$steps" $offload 2>&1 | tee "$O/capacity.txt") &
bench=$!
# Peak device memory while it runs (nvidia-smi's used, MiB), every 5 s.
peak=0
while kill -0 "$bench" 2>/dev/null; do
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
  [[ "$used" =~ ^[0-9]+$ ]] && [ "$used" -gt "$peak" ] && peak=$used
  sleep 5
done
wait "$bench"
rc=$?
echo "peak device memory in use (nvidia-smi, sampled every 5 s): $peak MiB"
exit $rc
