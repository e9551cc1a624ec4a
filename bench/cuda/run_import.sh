#!/bin/bash
# Imported GPT-2 124M against the built-in gpt family on one GPU, in one
# process (bench/train/import_benchmark --device cuda, bf16): the graph
# bench/train/gpt2_onnx.py exported on the build machine (torch 1.13; staged
# by bench/cuda/stage.sh as data/gpt2_124m_graph.onnx, without weights), Loom's
# initial parameters written into it, checked as `loom run` checks a job
# (device: cuda: its step plans onto the CUDA launches), trained alternately
# with the built-in family through the Trainer as `loom train` does, best
# round each. Must reach: the imported side at >= 0.95 of the
# built-in family's tokens/s, with the two sides' losses agreeing.
#   device tool: run(command="bash bench/cuda/run_import.sh", carry=[".device/gpu"])
# Env: IMPORT_STEPS (20), IMPORT_ROUNDS (3), IMPORT_FLAGS (extra flags, e.g. --unrecovered).
set -u
. "$(dirname "$0")/device_env.sh"
graph=$D/data/gpt2_124m_graph.onnx
[ -f "$graph" ] || { echo "run_import: $graph is missing (run bench/cuda/stage.sh)"; exit 1; }
timeout 500 "$D/bin/import_benchmark" --device cuda --config gpt2 --onnx "$graph" --steps "${IMPORT_STEPS:-20}" \
  --warmup 3 --rounds "${IMPORT_ROUNDS:-3}" ${IMPORT_FLAGS:-} 2>&1 | tee "$O/import_bench.txt"
s=${PIPESTATUS[0]}
ratio=$(awk '/^ratio imported /{print $3}' "$O/import_bench.txt")
ok=$($PY -c "print('PASS' if '$s' == '0' and float('${ratio:-0}') >= 0.95 else 'FAIL')")
echo "run_import: imported/built-in tokens/s ${ratio:-none} (must reach 0.95), exit $s: $ok"
[ "$ok" = PASS ]
