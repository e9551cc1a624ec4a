#!/bin/bash
# Builds the libFuzzer targets for the checkpoint parsers with clang++-14
# (-fsanitize=fuzzer,address,undefined; not through Bazel) and runs each for a
# number of executions, starting from and then merging back into the committed
# corpus runtime/checkpoint/fuzz/corpus/<target>/ (kept small: inputs up to
# MAX_LEN bytes, minimised to an edge-coverage set with -merge=1 -use_counters=0).
#
#   runtime/checkpoint/fuzz/run_fuzz.sh [RUNS] [TARGET...]
#     RUNS     executions per target (default 1000000)
#     TARGET   safetensors_fuzz, manifest_fuzz (default: both)
#   env: BUILD_DIR (default /tmp/loom_ckpt_fuzz), MAX_LEN (default 2048)
#
# Prints libFuzzer's final stats line per target. Exit status non-zero when a
# target crashes (the crashing input is left in BUILD_DIR).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
RUNS="${1:-1000000}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(safetensors_fuzz manifest_fuzz)
BUILD_DIR="${BUILD_DIR:-/tmp/loom_ckpt_fuzz}"
MAX_LEN="${MAX_LEN:-2048}"
CXX="${CXX:-clang++-14}"
mkdir -p "$BUILD_DIR/obj"

FLAGS=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -I"$ROOT")
SRCS=(runtime/checkpoint/fuzz/fuzz_targets.cc runtime/checkpoint/safetensors.cc runtime/checkpoint/manifest.cc
      runtime/checkpoint/crc32c.cc runtime/checkpoint/file_io.cc base/dtype.cc base/tensor.cc base/allocator.cc
      base/device.cc)
ABSL_LIBS=$(ls /usr/lib/x86_64-linux-gnu/ | sed -n 's/^lib\(absl_.*\)\.so$/-l\1/p' | tr '\n' ' ')

OBJS=()
for s in "${SRCS[@]}"; do
  o="$BUILD_DIR/obj/$(echo "$s" | tr '/' '_').o"
  if [ ! -f "$o" ] || [ "$ROOT/$s" -nt "$o" ]; then
    echo "compile $s"
    "$CXX" "${FLAGS[@]}" -c "$ROOT/$s" -o "$o"
  fi
  OBJS+=("$o")
done

status=0
for t in "${TARGETS[@]}"; do
  name="${t%_fuzz}"
  bin="$BUILD_DIR/$t"
  echo "link $t"
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "$ROOT/runtime/checkpoint/fuzz/$t.cc" "${OBJS[@]}" $ABSL_LIBS -lpthread -o "$bin"
  corpus="$ROOT/runtime/checkpoint/fuzz/corpus/$name"
  work="$BUILD_DIR/work_$name"
  rm -rf "$work" && mkdir -p "$work" "$corpus"
  echo "run $t: $RUNS executions"
  if ! (cd "$BUILD_DIR" && "$bin" -runs="$RUNS" -max_len="$MAX_LEN" -print_final_stats=1 \
        -rss_limit_mb=2048 -timeout=10 "$work" "$corpus" > "$BUILD_DIR/$t.log" 2>&1); then
    echo "FAIL: $t crashed; see $BUILD_DIR/$t.log"
    tail -30 "$BUILD_DIR/$t.log"
    status=1
    continue
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)" "$BUILD_DIR/$t.log" || true
  # Minimise: the smallest set of inputs that keeps every covered edge
  # (-use_counters=0: hit counts do not count as new features).
  merged="$BUILD_DIR/merged_$name"
  rm -rf "$merged" && mkdir -p "$merged"
  "$bin" -merge=1 -use_counters=0 -max_len="$MAX_LEN" "$merged" "$corpus" "$work" > "$BUILD_DIR/$t.merge.log" 2>&1
  grep "MERGE-OUTER: .* new files" "$BUILD_DIR/$t.merge.log" || true
  rm -f "$corpus"/* && cp "$merged"/* "$corpus"/
  echo "corpus $name: $(ls "$corpus" | wc -l) files, $(cat "$corpus"/* | wc -c) bytes"
done
exit $status
