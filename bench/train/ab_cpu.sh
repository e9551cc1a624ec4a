#!/bin/bash
# Before/after comparison of two trees' CPU training benchmark, in alternating
# rounds on this machine (docs/perf.md's protocol: each figure the best over
# the rounds; the median is printed too). Each tree runs its own binary from
# its own checkout (train_benchmark runs bench/train/torch_train.py from the
# working directory for the PyTorch side, on the same weights and batch):
#   bash bench/train/ab_cpu.sh A_CHECKOUT A_BINARY B_CHECKOUT B_BINARY
# e.g. A_BINARY = a copy of A's bazel-bin/bench/train/train_benchmark.
# AB_ROUNDS (default 5) rounds; AB_ARGS (default "--steps 30 --threads 1")
# are train_benchmark's flags (one thread: the other core absorbs the
# machine's own noise). Prints one line per round and the summary; logs in
# AB_LOG (default /tmp/ab_cpu).
set -euo pipefail
[ $# = 4 ] || { echo "usage: $0 A_CHECKOUT A_BINARY B_CHECKOUT B_BINARY" >&2; exit 2; }
rounds=${AB_ROUNDS:-5}
args=${AB_ARGS:-"--steps 30 --threads 1"}
log=${AB_LOG:-/tmp/ab_cpu}
mkdir -p "$log"
declare -A dir=([A]=$1 [B]=$3) bin=([A]=$2 [B]=$4)
for r in $(seq 1 "$rounds"); do
  line="round $r:"
  for side in A B; do
    # shellcheck disable=SC2086
    (cd "${dir[$side]}" && "${bin[$side]}" $args) > "$log/$side.$r.txt" 2>&1
    tps=$(awk '$1 == "loom" {print $3}' "$log/$side.$r.txt")
    [ -n "$tps" ] || { echo "tree $side round $r: no loom line (see $log/$side.$r.txt)" >&2; exit 1; }
    echo "$tps" >> "$log/$side.tps"
    line="$line $side $tps"
  done
  echo "$line  (load $(cut -d' ' -f1 /proc/loadavg))"
done
python3 - "$log" <<'PY'
import statistics, sys
log = sys.argv[1]
a = [float(x) for x in open(f"{log}/A.tps")]
b = [float(x) for x in open(f"{log}/B.tps")]
print(f"best   A {max(a):.0f}  B {max(b):.0f}  B/A {max(b) / max(a):.3f}")
print(f"median A {statistics.median(a):.0f}  B {statistics.median(b):.0f}  B/A {statistics.median(b) / statistics.median(a):.3f}")
ratios = [y / x for x, y in zip(a, b)]
print("per-round B/A " + " ".join(f"{r:.3f}" for r in ratios))
PY
