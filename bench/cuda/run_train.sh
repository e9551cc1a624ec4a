#!/bin/bash
# On the GPU machine, after bench/cuda/stage.sh (which stages the corpus too):
#   1. `loom train examples/gpt-cuda.yaml` (device: cuda, bf16) end to end;
#   2. `loom run` of a small device: cuda job (coordinator + agent + one worker
#      rank, NCCL as the CUDA backend, world size 1), end to end.
#   device tool: run(command="bash bench/cuda/run_train.sh", carry=[".device/gpu"])
# Env: TRAIN_STEPS (the yaml's steps unless set), RUN_STEPS (loom run: 100),
#      PARTS ("train run": which of the two).
set -u
. "$(dirname "$0")/device_env.sh"
Dabs=$(cd "$D" && pwd)
corpus=$Dabs/data/fortunes
bin=$Dabs/bin/loom
cd /tmp
status=0
if [[ " ${PARTS:-train run} " == *" train "* ]]; then
  sed "s|/usr/share/games/fortunes|$corpus|" "$OLDPWD/examples/gpt-cuda.yaml" > /tmp/loom_gpt_cuda.yaml
  timeout 400 "$bin" train /tmp/loom_gpt_cuda.yaml ${TRAIN_STEPS:+--steps "$TRAIN_STEPS"} 2>&1 | tee "$O/loom_train_cuda.txt"
  s=${PIPESTATUS[0]}
  echo "run_train (loom train): $([ "$s" = 0 ] && echo PASS || echo "FAILED (exit $s)")"
  [ "$s" = 0 ] || status=1
fi
if [[ " ${PARTS:-train run} " == *" run "* ]]; then
  cat > /tmp/loom_run_cuda.yaml <<YAML
name: gpt-cuda-run
model: {family: gpt, n_layer: 2, n_head: 4, d_model: 128, seq_len: 128, vocab: 256}
train: {batch_size: 16, steps: 100, lr: 0.003, eval_every: 100, eval_batches: 2, sample_tokens: 64, precision: bf16}
data: {path: $corpus, format: text}
device: cuda
YAML
  timeout 300 "$bin" run /tmp/loom_run_cuda.yaml --steps "${RUN_STEPS:-100}" --run-dir /tmp/loom_run_cuda 2>&1 |
    tee "$O/loom_run_cuda.txt" | grep -Ev '^step [0-9]+/' | tail -25
  s=${PIPESTATUS[0]}
  grep -q "CUDA collectives through nccl" "$O/loom_run_cuda.txt" || s=${s/#0/1}
  echo "run_train (loom run, NCCL world 1): $([ "$s" = 0 ] && echo PASS || echo "FAILED (exit $s)")"
  [ "$s" = 0 ] || status=1
fi
exit $status
