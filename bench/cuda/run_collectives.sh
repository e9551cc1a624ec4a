#!/bin/bash
# cuda:gloo all_reduce on the GPU machine, 2 and 4 ranks (processes) sharing
# the GPU, after bench/cuda/stage.sh:
#   device tool: run(command="bash bench/cuda/run_collectives.sh", carry=[".device/gpu"])
# One `loom bench collectives` run prints, per size and rank count, cuda:gloo
# busbw next to pinned D2H, pinned H2D (every rank copying at once) and CPU
# Gloo busbw, then one line per size against the bound of issue 25
# (busbw >= 80% of the minimum of the three, from 1 MiB up), each with where
# the op's time went on the staging thread (waits for the copies each way,
# the inner Gloo ops, the pipeline's own cost). Exit 1 if the
# run failed or a size from 1 MiB up is under 80%. BUCKET (default 4M) is
# --bucket-bytes; MAX (default 64M) the largest size; ROUNDS (default 3) is
# --rounds: cuda:gloo and Gloo run that many times in alternating order, and
# each row keeps its fastest round; a second line per size gives the bound
# over the rounds' medians. --full times each size over 256 MiB of traffic
# (64 MiB without it), which steadies the CPU Gloo reference. STAGING
# (default auto) is --staging-path: auto or shm (shared memory), or ring (the
# inner Gloo ring over each rank's staging buffer for all_reduce, Gloo's
# buckets for the other ops). OPS (default all_reduce) is --ops, e.g.
# OPS=all_reduce,reduce_scatter,all_gather; the bound applies to all_reduce.
set -u
. "$(dirname "$0")/device_env.sh"
echo "== cuda:gloo all_reduce vs pinned copies and CPU Gloo"
"$D/bin/loom" bench collectives --full --backends=cuda:gloo --ranks=2,4 --ops="${OPS:-all_reduce}" --min-bytes=1M \
  --max-bytes="${MAX:-64M}" --bucket-bytes="${BUCKET:-4M}" --staging-path="${STAGING:-auto}" --rounds="${ROUNDS:-3}" --torch=0 --timeout=240 2>"$O/collectives.err" |
  tee "$O/collectives.txt"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || tail -20 "$O/collectives.err"
under=$(grep '^# cuda:gloo all_reduce' "$O/collectives.txt" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /%$/) { p = $i; sub(/%/, "", p); if (p + 0 < 80) print }}')
lines=$(grep -c '^# cuda:gloo all_reduce' "$O/collectives.txt")
echo "== bound: $lines sizes measured; under 80%:"
echo "${under:-  none}"
[ "$rc" = 0 ] && [ "$lines" -gt 0 ] && [ -z "$under" ]
