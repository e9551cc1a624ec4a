#!/bin/bash
# `loom train examples/gpt-cuda.yaml` (device: cuda, bf16) end to end on the GPU
# machine, then the same job through `loom run` (coordinator + agent + one
# worker rank, NCCL as the CUDA backend, world size 1), after
# bench/cuda/stage.sh (which stages the corpus too):
#   device tool: run(command="bash bench/cuda/run_train.sh", carry=[".device/gpu"])
# Env: TRAIN_STEPS (the yaml's steps unless set), RUN_STEPS (loom run: 100).
set -u
. "$(dirname "$0")/device_env.sh"
job=/tmp/loom_gpt_cuda.yaml
sed "s|/usr/share/games/fortunes|$PWD/$D/data/fortunes|" examples/gpt-cuda.yaml > "$job"
cd /tmp
timeout 400 "$OLDPWD/$D/bin/loom" train "$job" ${TRAIN_STEPS:+--steps "$TRAIN_STEPS"} 2>&1 | tee "$O/loom_train_cuda.txt"
status=${PIPESTATUS[0]}
echo "run_train (loom train): $([ "$status" = 0 ] && echo PASS || echo "FAILED (exit $status)")"
timeout 400 "$OLDPWD/$D/bin/loom" run "$job" --steps "${RUN_STEPS:-100}" --run-dir /tmp/loom_run_cuda 2>&1 |
  tee "$O/loom_run_cuda.txt" | grep -Ev '^step [0-9]+/' | tail -25
rs=${PIPESTATUS[0]}
grep -q "CUDA collectives through nccl" "$O/loom_run_cuda.txt" || rs=${rs/#0/1}
echo "run_train (loom run, NCCL world 1): $([ "$rs" = 0 ] && echo PASS || echo "FAILED (exit $rs)")"
[ "$status" = 0 ] && [ "$rs" = 0 ]
