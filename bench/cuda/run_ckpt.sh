#!/bin/bash
# Activation checkpointing on GPT-2 124M (B16 T1024, bf16) on one GPU: the
# compiled step without and with CompileOptions::checkpoint_blocks, alternating
# round by round on the same weights and batches, best round each. Prints the
# activation arena (the step's preplanned activation memory), all device
# memory the executor holds, ms/step, and the loss gap between the two modes.
# Must reach (issue 23): the arena at least 50% smaller, at most 40% slower.
#   here:  bash bench/cuda/stage.sh
#   there: device tool run(command="bash bench/cuda/run_ckpt.sh", carry=[".device/gpu"])
# Env: CKPT_ROUNDS (2), GPT2_STEPS (20), GPT2_WARMUP (5).
set -u
. "$(dirname "$0")/device_env.sh"
steps=${GPT2_STEPS:-20}; warm=${GPT2_WARMUP:-5}
data=/tmp/loom_gpt2_data
[ -d "$data/batches" ] || $PY bench/cuda/train_torch.py --init "$data" --preset gpt2-124m --steps "$steps" --warmup "$warm" || exit 1
status=0
: > "$O/ckpt_none.txt"; : > "$O/ckpt_blocks.txt"
for r in $(seq 1 "${CKPT_ROUNDS:-2}"); do
  for mode in none blocks; do
    echo "== round $r: --activation-checkpointing=$mode"
    timeout 240 "$D/bin/train_bench" --preset=gpt2-124m --data="$data" --steps="$steps" --warmup="$warm" \
      --activation-checkpointing=$mode 2>&1 | tee -a "$O/ckpt_$mode.txt" | grep -E "^RESULT|train_bench:"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
done
$PY - "$O/ckpt_none.txt" "$O/ckpt_blocks.txt" <<'PY' || status=1
import re, sys
def read(path):
    runs, losses = [], None
    for line in open(path):
        if line.startswith("RESULT"):
            runs.append({k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", line)})
        elif line.startswith("losses:"):
            losses = [float(x) for x in line.split()[1:]]
    if not runs or losses is None:
        sys.exit(f"run_ckpt: no RESULT in {path}")
    return min(runs, key=lambda r: r["ms_per_step"]), losses
(a, la), (b, lb) = read(sys.argv[1]), read(sys.argv[2])
cut = 1 - b["arena_mib"] / a["arena_mib"]
slower = b["ms_per_step"] / a["ms_per_step"] - 1
gap = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
print(f"none:   arena {a['arena_mib']:.0f} MiB, device {a['device_mib']:.0f} MiB, {a['ms_per_step']:.2f} ms/step, {a['tokens_per_s']:.0f} tok/s")
print(f"blocks: arena {b['arena_mib']:.0f} MiB, device {b['device_mib']:.0f} MiB, {b['ms_per_step']:.2f} ms/step, {b['tokens_per_s']:.0f} tok/s")
print(f"blocks against none: arena -{100 * cut:.1f}% (must reach 50%), step time {100 * slower:+.1f}% (at most +40%), "
      f"worst loss gap {gap:.2e} relative")
ok = cut >= 0.5 and slower <= 0.4
print("run_ckpt:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
exit $status
