#!/bin/bash
# `loom train examples/gpt-cuda.yaml` (device: cuda, bf16) end to end on the GPU
# machine, after bench/cuda/stage.sh (which stages the corpus too):
#   device tool: run(command="bash bench/cuda/run_train.sh", carry=[".device/gpu"])
# Env: TRAIN_STEPS (the yaml's steps unless set).
set -u
. "$(dirname "$0")/device_env.sh"
job=/tmp/loom_gpt_cuda.yaml
sed "s|/usr/share/games/fortunes|$PWD/$D/data/fortunes|" examples/gpt-cuda.yaml > "$job"
cd /tmp
timeout 400 "$OLDPWD/$D/bin/loom" train "$job" ${TRAIN_STEPS:+--steps "$TRAIN_STEPS"} 2>&1 | tee "$O/loom_train_cuda.txt"
status=${PIPESTATUS[0]}
echo "run_train: $([ "$status" = 0 ] && echo PASS || echo "FAILED (exit $status)")"
exit "$status"
