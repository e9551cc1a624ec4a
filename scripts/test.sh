#!/usr/bin/env bash
# Command 2 of the README: installs what is missing, builds everything, runs every
# test group, prints the time of each phase, and ends with "N passed, N failed".
#
#   scripts/test.sh            # the CI subset of heavy matrices
#   scripts/test.sh --full     # heavy matrices in full (LOOM_FULL=1 in tests)
set -uo pipefail
cd "$(dirname "$0")/.."

FULL=0
for a in "$@"; do
  case "$a" in
    --full) FULL=1 ;;
    *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
  esac
done

phase_start=$(date +%s)
t0=$phase_start
phase() {  # phase NAME: prints the time since the previous phase ended
  local now; now=$(date +%s)
  printf '[phase] %-28s %5ds\n' "$1" "$((now - phase_start))"
  phase_start=$now
}

if ! bash scripts/setup.sh; then
  echo "setup failed"; echo "0 passed, 1 failed"; exit 1
fi
phase "install"

BAZEL_FLAGS=(--color=no --curses=no --noshow_progress)
TEST_ENV=(--test_env=LOOM_FULL=$FULL --test_env=HOME --test_env=PATH)

# Debian's Bazel passes the sandbox's debug lines through; they are filtered.
if ! bazel build "${BAZEL_FLAGS[@]}" //... 2>&1 | grep -v 'src/main/tools/linux-sandbox' | tail -n 40; then
  echo "build failed"; echo "0 passed, 1 failed"; exit 1
fi
if [ "${PIPESTATUS[0]}" != 0 ]; then
  echo "build failed"; echo "0 passed, 1 failed"; exit 1
fi
phase "build"

total_pass=0
total_fail=0

# ---- Layering: the import order of docs/layers.txt -------------------------
# scripts/check_layers.py prints one PASS:/FAIL: line per case (its self-check's
# planted cases first, then the build graph, the #include lines and the docs
# copy); each case counts as one test. An exit without a FAIL line (bad input,
# bazel query failing) counts as one failure.
count_cases() {  # count_cases LOG RC: adds LOG's PASS:/FAIL: lines to the totals
  local p f
  p=$(grep -c '^PASS: ' "$1"); f=$(grep -c '^FAIL: ' "$1")
  if [ "$2" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  phase "layers ($p passed, $f failed)"
}
layers_log=$(mktemp)
/usr/bin/python3 scripts/check_layers.py >"$layers_log" 2>&1
layers_rc=$?
cat "$layers_log"
count_cases "$layers_log" "$layers_rc"
rm -f "$layers_log"
# ---------------------------------------------------------------------------

# Test groups: each top-level package that has tests, in dependency order.
TEST_GROUPS=(base kernels compiler collectives dtensor parallel runtime proto tests deploy bench)
for g in "${TEST_GROUPS[@]}"; do
  [ -d "$g" ] || continue
  targets=$(bazel query "${BAZEL_FLAGS[@]}" "tests(//$g/...) except attr(tags, 'benchmark|manual', tests(//$g/...))" 2>/dev/null)
  [ -n "$targets" ] || continue
  log=$(mktemp)
  bazel test "${BAZEL_FLAGS[@]}" "${TEST_ENV[@]}" $targets >"$log" 2>&1
  pass=$(grep -cE '^//.* (\(cached\) )?PASSED' "$log")
  fail=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$log")
  grep -E '^//' "$log"
  if [ "$fail" != 0 ]; then
    grep -E '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$log" | awk '{print $1}' | while read -r t; do
      f="bazel-testlogs/${t#//}"; f="${f/://}/test.log"
      echo "---- $t (last lines of $f)"; tail -n 30 "$f" 2>/dev/null
    done
  fi
  rm -f "$log"
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  phase "test:$g ($pass passed, $fail failed)"
done

# Python-side checks that are not Bazel targets (PyTorch parity scripts are
# driven from Bazel tests; this is the place for anything else).
echo "[total] $(( $(date +%s) - t0 ))s"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
