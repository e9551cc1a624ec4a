#!/usr/bin/env bash
# Command 2 of the README (and .ci/run): installs what is missing, builds every
# target (those tagged manual too), runs every test group and the fuzz targets
# (scripts/fuzz.sh, each one case), prints the time of
# each phase, and ends with "P passed, F failed, S skipped", counting test
# cases from each test's test.xml (scripts/test_report.py; tests/README.md
# says how they are counted).
#
#   scripts/test.sh            # the CI subsets of heavy matrices (LOOM_FULL unset)
#   scripts/test.sh --full     # the full sweeps (LOOM_FULL=1 in every test)
#
# The dashboard's browser cases (tests/dashboard) run after the Bazel tests.
#
# Exit status 0 when no case failed and neither setup nor Bazel reported an
# error (each such error counts as one failed case); 1 otherwise; 2 on a bad
# argument.
set -uo pipefail
cd "$(dirname "$0")/.."

FULL=0
for a in "$@"; do
  case "$a" in
    --full) FULL=1 ;;
    *) echo "usage: scripts/test.sh [--full] (unknown argument '$a')" >&2; exit 2 ;;
  esac
done
unset LOOM_FULL  # only --full turns the full sweeps on

PY=/usr/bin/python3  # Debian's interpreter (standard library only here)
REPORT=scripts/test_report.py
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
RESULTS=$WORK/results.jsonl
touch "$RESULTS"
BAZEL_FLAGS=(--color=no --curses=no --noshow_progress)
TEST_ENV=(--test_env=HOME --test_env=PATH)
[ "$FULL" = 1 ] && TEST_ENV+=(--test_env=LOOM_FULL=1)
# Test groups, in dependency order; a top-level folder not listed here that
# holds tests runs as a group after these.
TEST_GROUPS=(base kernels compiler collectives dtensor parallel runtime proto tests deploy bench scripts)

errors=0  # setup and Bazel errors; each counts as one failed case
checks_pass=0 checks_fail=0  # cases of checks outside Bazel (layering, doc paths, namespaces)
error() { echo "ERROR: $*"; errors=$((errors + 1)); }

phase_start=$(date +%s)
t0=$phase_start
phase() {  # phase NAME: prints the time since the previous phase ended
  local now; now=$(date +%s)
  printf '[phase] %-40s %5ds\n' "$1" "$((now - phase_start))"
  phase_start=$now
}

# Bazel's sandbox debug lines are noise in every log shown here.
unsandbox() { grep -v 'src/main/tools/linux-sandbox'; }

# run_report ARGS...: runs test_report.py, prints its lines, and sets P F S
# from its last line ("counts P F S").
run_report() {
  local out=$WORK/report.out last
  P=0 F=0 S=0
  if ! "$PY" "$REPORT" "$@" >"$out" 2>&1; then
    cat "$out"; error "scripts/test_report.py $1 failed"; return
  fi
  last=$(tail -n 1 "$out")
  head -n -1 "$out"
  if [[ $last =~ ^counts\ ([0-9]+)\ ([0-9]+)\ ([0-9]+)$ ]]; then
    P=${BASH_REMATCH[1]} F=${BASH_REMATCH[2]} S=${BASH_REMATCH[3]}
  else
    echo "$last"; error "scripts/test_report.py $1 printed no counts"
  fi
}

# query EXPR FILE: the labels EXPR names, one a line, into FILE. Bazel's
# errors are shown and counted; with --keep_going a broken package costs only
# its own targets.
query() {
  local rc
  bazel query "${BAZEL_FLAGS[@]}" --keep_going "$1" >"$2" 2>"$WORK/query.err"
  rc=$?
  if [ $rc != 0 ]; then
    unsandbox <"$WORK/query.err" | grep -v '^Loading' | tail -n 30
    error "bazel query \"$1\" exited $rc"
  fi
}

finish() {  # prints the summary and the closing line, then exits
  run_report summary "$RESULTS"
  local failed=$((F + errors + checks_fail)) passed=$((P + checks_pass))
  echo "[total] $(( $(date +%s) - t0 ))s"
  echo "$passed passed, $failed failed, $S skipped"
  [ "$failed" = 0 ] && exit 0
  exit 1
}

if ! bash scripts/setup.sh; then
  error "scripts/setup.sh failed"
  finish
fi
phase "install"

# Every target: //... leaves out targets tagged manual (the GPU check binaries,
# planner tools, ...), so they are named explicitly. Benchmarks build here and
# stay out of the test run.
query 'attr(tags, "\bmanual\b", //...)' "$WORK/manual.txt"
mapfile -t manual <"$WORK/manual.txt"
bazel build "${BAZEL_FLAGS[@]}" --keep_going --profile="$WORK/build_profile.gz" -- //... "${manual[@]}" \
  >"$WORK/build.log" 2>&1
rc=$?
# Where the build's time went: action kinds, the slowest actions, the critical path.
$PY scripts/build_profile.py "$WORK/build_profile.gz" --top 12 || echo "build profile: not readable"
if [ $rc != 0 ]; then
  # Each error with the compiler's or linker's lines that follow it.
  unsandbox <"$WORK/build.log" | grep -E -A 15 '^ERROR' | head -n 150
  error "bazel build exited $rc"
else
  unsandbox <"$WORK/build.log" | tail -n 3
fi
phase "build (${#manual[@]} manual targets included)"

# Checks outside Bazel. Each script prints one PASS:/FAIL: line per case (its
# self-check's planted cases first); each line is one case, and an exit without
# a FAIL line (bad input, bazel query failing) counts as one failure.
#   check_script NAME SCRIPT
check_script() {
  local log="$WORK/$1.log" rc p f
  "$PY" "$2" >"$log" 2>&1
  rc=$?
  cat "$log"
  p=$(grep -c '^PASS: ' "$log"); f=$(grep -c '^FAIL: ' "$log")
  if [ $rc != 0 ] && [ "$f" = 0 ]; then f=1; fi
  checks_pass=$((checks_pass + p)); checks_fail=$((checks_fail + f))
  phase "$1 ($p passed, $f failed)"
}
# Layering: the import order of docs/layers.txt (build graph, #include lines,
# the docs copy).
check_script layers scripts/check_layers.py
# The call path that docs/architecture.md lists ("From `loom run job.yaml` to
# a kernel launch"): one case per named function.
check_script "doc paths" scripts/check_doc_paths.py
# Namespaces follow folders (docs/architecture.md): one case per source folder.
check_script namespaces scripts/check_namespaces.py

query "tests(//...) except attr(tags, 'benchmark|manual', tests(//...))" "$WORK/tests.txt"
declare -A by_group=()
extra_groups=()
while read -r t; do
  [ -n "$t" ] || continue
  g=${t#//}
  g=${g%%[/:]*}
  [ -n "${by_group[$g]:-}" ] || { [[ " ${TEST_GROUPS[*]} " == *" $g "* ]] || extra_groups+=("$g"); }
  by_group[$g]+="$t "
done <"$WORK/tests.txt"

for g in "${TEST_GROUPS[@]}" "${extra_groups[@]}"; do
  [ -n "${by_group[$g]:-}" ] || continue
  read -r -a targets <<<"${by_group[$g]}"
  echo "== test group $g (${#targets[@]} targets)"
  bazel test "${BAZEL_FLAGS[@]}" "${TEST_ENV[@]}" --keep_going \
    --build_event_json_file="$WORK/bep.$g.json" -- "${targets[@]}" >"$WORK/test.$g.log" 2>&1
  rc=$?
  # 3: some test failed (the report names it); anything else is Bazel's own error.
  if [ $rc != 0 ] && [ $rc != 3 ]; then
    unsandbox <"$WORK/test.$g.log" | grep -E -A 15 '^ERROR' | head -n 80
    echo "bazel test exited $rc"
  fi
  run_report group "$g" "$WORK/bep.$g.json" "$rc" "$RESULTS" "${targets[@]}"
  phase "test:$g ($P passed, $F failed, $S skipped)"
done

# The dashboard in a real headless Chromium (tests/dashboard/README.md):
# puppeteer-core drives Debian's chromium against a real coordinator and
# agent from the build above. One PASS:/FAIL: line per case, each case with
# its own time limit; the whole phase is stopped after DASHBOARD_SECONDS (a
# stop, or an exit without a FAIL line, counts as one failure).
DASHBOARD_SECONDS=240
timeout -k 15 "$DASHBOARD_SECONDS" node tests/dashboard/browser_test.js >"$WORK/dashboard.log" 2>&1
rc=$?
cat "$WORK/dashboard.log"
dp=$(grep -c '^PASS: ' "$WORK/dashboard.log"); df=$(grep -c '^FAIL: ' "$WORK/dashboard.log")
if [ $rc != 0 ] && [ "$df" = 0 ]; then df=1; echo "FAIL: dashboard: exited $rc (124: over ${DASHBOARD_SECONDS}s)"; fi
checks_pass=$((checks_pass + dp)); checks_fail=$((checks_fail + df))
phase "dashboard ($dp passed, $df failed)"

# Fuzzing: scripts/fuzz.sh builds the libFuzzer targets with clang (objects
# kept in its build folder between runs) and runs each for FUZZ_SECONDS from
# its committed corpus. Each target is one case: a crash or a hang fails it,
# and its line names the reproducer. An exit without a FAIL line (setup
# broken) counts as one failure.
FUZZ_SECONDS=30
bash scripts/fuzz.sh --seconds "$FUZZ_SECONDS" >"$WORK/fuzz.log" 2>&1
rc=$?
cat "$WORK/fuzz.log"
fp=$(grep -c '^PASS: ' "$WORK/fuzz.log"); ff=$(grep -c '^FAIL: ' "$WORK/fuzz.log")
if [ $rc != 0 ] && [ "$ff" = 0 ]; then ff=1; fi
checks_pass=$((checks_pass + fp)); checks_fail=$((checks_fail + ff))
phase "fuzz ($fp passed, $ff failed, ${FUZZ_SECONDS}s each)"

finish
