#!/usr/bin/env bash
# Builds Loom's libFuzzer targets with clang++-14 (-fsanitize=fuzzer,address,
# undefined; outside Bazel, which configures gcc) and runs each for a bounded
# time from its committed seed corpus, two targets at a time. The corpus in
# the repository is only read: new inputs go to a work folder under BUILD_DIR.
#
#   scripts/fuzz.sh [--seconds N] [--build-dir DIR] [TARGET...]
#     --seconds N     run time of each target (default 40, at most 60)
#     --build-dir DIR objects, binaries, logs, work corpora (default /tmp/loom_fuzz)
#     TARGET          safetensors_fuzz, manifest_fuzz, jobspec_fuzz, ir_text_fuzz,
#                     coordinator_fuzz (default: all)
#
# Each target's sources are the workspace .cc files its fuzz-body library
# depends on (bazel query), plus the generated .pb.cc under bazel-bin (bazel
# builds them first). Prints one line per target, "PASS: <target> ..." or
# "FAIL: <target> ... reproducer <path>", then "fuzz: P passed, F failed".
# Exit status 0 when every target built and ran without a crash, 1 otherwise,
# 2 on a bad argument.
set -uo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=40
BUILD_DIR=/tmp/loom_fuzz
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds)
      SECONDS_EACH="${2:-}"; shift 2 || { echo "--seconds needs a value" >&2; exit 2; }
      if ! [[ $SECONDS_EACH =~ ^[0-9]+$ ]] || [ "$SECONDS_EACH" -lt 1 ] || [ "$SECONDS_EACH" -gt 60 ]; then
        echo "--seconds: expected 1..60, got '$SECONDS_EACH'" >&2; exit 2
      fi ;;
    --build-dir) BUILD_DIR="${2:-}"; shift 2 || { echo "--build-dir needs a value" >&2; exit 2; } ;;
    -*) echo "unknown flag '$1' (usage: scripts/fuzz.sh [--seconds N] [--build-dir DIR] [TARGET...])" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done

# target -> "fuzz-body library|libFuzzer entry|seed corpus"
declare -A TABLE=(
  [safetensors_fuzz]="//runtime/checkpoint/fuzz:fuzz_targets|runtime/checkpoint/fuzz/safetensors_fuzz.cc|runtime/checkpoint/fuzz/corpus/safetensors"
  [manifest_fuzz]="//runtime/checkpoint/fuzz:fuzz_targets|runtime/checkpoint/fuzz/manifest_fuzz.cc|runtime/checkpoint/fuzz/corpus/manifest"
  [jobspec_fuzz]="//runtime/jobspec/fuzz:jobspec_fuzz_body|runtime/jobspec/fuzz/jobspec_fuzz.cc|runtime/jobspec/fuzz/corpus"
  [ir_text_fuzz]="//compiler/ir/fuzz:ir_text_fuzz_body|compiler/ir/fuzz/ir_text_fuzz.cc|compiler/ir/fuzz/corpus"
  [coordinator_fuzz]="//runtime/service/fuzz:coordinator_fuzz_body|runtime/service/fuzz/coordinator_fuzz.cc|runtime/service/fuzz/corpus"
)
ORDER=(safetensors_fuzz manifest_fuzz jobspec_fuzz ir_text_fuzz coordinator_fuzz)
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ORDER[@]}")
for t in "${TARGETS[@]}"; do
  [ -n "${TABLE[$t]:-}" ] || { echo "unknown target '$t' (known: ${ORDER[*]})" >&2; exit 2; }
done

CXX="${CXX:-clang++-14}"
command -v "$CXX" >/dev/null || { echo "FAIL: $CXX not found"; echo "fuzz: 0 passed, ${#TARGETS[@]} failed"; exit 1; }
mkdir -p "$BUILD_DIR/obj"
BAZEL_FLAGS=(--color=no --curses=no --noshow_progress)
FLAGS=(-std=c++17 -gline-tables-only -O1 -fno-omit-frame-pointer -march=x86-64-v3 -mfma
       -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT
       -I. -Ibazel-bin)
ABSL_LIBS=$(ls /usr/lib/x86_64-linux-gnu/ | sed -n 's/^lib\(absl_.*\)\.so$/-l\1/p' | tr '\n' ' ')
LIBS=(-lgrpc++ -lgrpc -lgpr -lprotobuf -lyaml-cpp -lsentencepiece -lsentencepiece_train -lsqlite3 -lcpp-httplib -lz -lbrotlidec
      -lbrotlienc -lssl -lcrypto -lopenblas $ABSL_LIBS -lpthread)

libs=()
for t in "${TARGETS[@]}"; do libs+=("${TABLE[$t]%%|*}"); done
if ! bazel build "${BAZEL_FLAGS[@]}" --jobs=2 -- "${libs[@]}" >"$BUILD_DIR/bazel.log" 2>&1; then
  grep -v linux-sandbox "$BUILD_DIR/bazel.log" | grep -A 10 '^ERROR' | head -n 40
  echo "FAIL: bazel build of the fuzz bodies"; echo "fuzz: 0 passed, ${#TARGETS[@]} failed"; exit 1
fi

# sources LABEL: the workspace .cc files and generated .pb.cc it depends on.
sources() {
  bazel query "${BAZEL_FLAGS[@]}" "kind('source file', deps($1))" 2>/dev/null |
    sed -n 's|^//\([^:]*\):\(.*\.cc\)$|\1/\2|p; s|^//:\(.*\.cc\)$|\1|p'
  bazel query "${BAZEL_FLAGS[@]}" "kind('generated file', deps($1))" 2>/dev/null |
    sed -n 's|^//\([^:]*\):\(.*\.pb\.cc\)$|bazel-bin/\1/\2|p'
}

# compile SRC: prints the object's path; compiles when the object is missing
# or older than SRC or than any header it included (the compiler's -MMD list).
compile() {
  local o="$BUILD_DIR/obj/$(echo "$1" | tr '/' '_').o" deps
  if [ -f "$o" ] && [ -f "$o.d" ] && ! [ "$1" -nt "$o" ]; then
    deps=$(sed -e 's/\\$//' -e '1s/^[^:]*://' "$o.d")
    # shellcheck disable=SC2086
    [ -z "$(find $deps -newer "$o" -print -quit 2>&1)" ] && { echo "$o"; return 0; }
  fi
  "$CXX" "${FLAGS[@]}" -MMD -MF "$o.d" -c "$1" -o "$o" 2>"$o.log" || { cat "$o.log" >&2; return 1; }
  echo "$o"
}
export -f compile
export BUILD_DIR CXX
export FLAGS_STR="${FLAGS[*]}"

# build TARGET: compiles its sources (two compilers at a time, the machine's
# two cores) and links $BUILD_DIR/TARGET; prints the link log's tail and
# returns 1 when it did not build. Sets `built` (seconds) and `nsrcs`.
build() {
  local t=$1 lib entry corpus start srcs objs ok=1
  IFS='|' read -r lib entry corpus <<<"${TABLE[$t]}"
  start=$(date +%s)
  mapfile -t srcs < <(sources "$lib" | sort -u)
  nsrcs=${#srcs[@]}
  mapfile -t objs < <(printf '%s\n' "${srcs[@]}" | xargs -P 2 -I{} bash -c 'FLAGS=($FLAGS_STR); compile "$@"' _ {}) || ok=0
  [ ${#objs[@]} = ${#srcs[@]} ] || ok=0
  if [ $ok = 1 ]; then
    "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "$entry" "${objs[@]}" "${LIBS[@]}" -o "$BUILD_DIR/$t" 2>"$BUILD_DIR/$t.link.log" || ok=0
  fi
  built=$(( $(date +%s) - start ))
  [ $ok = 1 ] || { tail -n 20 "$BUILD_DIR/$t.link.log" 2>/dev/null; return 1; }
}

# fuzz TARGET: runs it for SECONDS_EACH from its corpus (new inputs to a work
# folder) and writes its verdict line to $BUILD_DIR/TARGET.verdict.
fuzz() {
  local t=$1 lib entry corpus work crashes rc runs repro
  IFS='|' read -r lib entry corpus <<<"${TABLE[$t]}"
  work="$BUILD_DIR/work_$t" crashes="$BUILD_DIR/crashes_$t"
  rm -rf "$work" "$crashes" && mkdir -p "$work" "$crashes"
  # -timeout: one input running over 10 s is a hang, reported like a crash.
  (cd "$BUILD_DIR" && TMPDIR="$BUILD_DIR" "./$t" -max_total_time="$SECONDS_EACH" -max_len=4096 -timeout=10 \
     -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" "$work" "$OLDPWD/$corpus" \
     >"$BUILD_DIR/$t.log" 2>&1)
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD_DIR/$t.log")
  if [ $rc = 0 ]; then
    echo "PASS: $t ${runs:-?} executions in ${SECONDS_EACH}s (built in ${BUILT[$t]}s, $(ls "$corpus" | wc -l) seeds)"
  else
    repro=$(ls "$crashes"/* 2>/dev/null | head -n 1)
    grep -E "ERROR:|SUMMARY:|abort|error message|round trip|contract" "$BUILD_DIR/$t.log" | head -n 10
    echo "FAIL: $t exited $rc; reproducer ${repro:-none} (log $BUILD_DIR/$t.log)"
  fi >"$BUILD_DIR/$t.verdict"
}

# Build every target first, then fuzz two at a time (each fuzzer is one process
# on one core).
passed=0 failed=0
declare -A BUILT
runnable=()
for t in "${TARGETS[@]}"; do
  if build "$t"; then
    BUILT[$t]=$built
    runnable+=("$t")
  else
    echo "FAIL: $t did not build ($nsrcs sources; logs in $BUILD_DIR)"
    failed=$((failed + 1))
  fi
done
for ((i = 0; i < ${#runnable[@]}; i += 2)); do
  fuzz "${runnable[$i]}" &
  [ $((i + 1)) -lt ${#runnable[@]} ] && fuzz "${runnable[$((i + 1))]}" &
  wait
done
for t in "${runnable[@]}"; do
  cat "$BUILD_DIR/$t.verdict"
  if grep -q '^PASS: ' "$BUILD_DIR/$t.verdict"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "fuzz: $passed passed, $failed failed"
[ $failed = 0 ]
