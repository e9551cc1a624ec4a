#!/bin/bash
# Runs `loom bench collectives` (as bench_collectives_main) with tiny sizes and
# 2 ranks. Mode "table" (bench_command_test): exit 0, the tables, the
# verification line. Mode "flags" (bench_flags_test): --json with --channels,
# and a bad flag or value exits 2 naming it. Every run is bounded by `timeout`.
set -u
BIN="$1"
MODE="${2:-table}"
fail=0
pass=0
check() {  # check NAME STATUS (0 = passed)
  if [ "$2" = 0 ]; then pass=$((pass + 1)); else echo "FAILED: $1"; fail=$((fail + 1)); fi
}
out=$(mktemp); err=$(mktemp)

if [ "$MODE" = table ]; then
# --torch=0: importing torch alone can take 30 s on a loaded 2-core machine;
# parsing and printing the torch rows are covered by bench_config_test.
timeout -k 5 50 "$BIN" --backends=gloo,tcp --ranks=2 --ops=all_reduce,reduce_scatter --min-bytes=1K \
    --max-bytes=4K --iters=3 --warmup=1 --torch=0 >"$out" 2>"$err"
rc=$?
cat "$out"
check "tiny run exits 0 (got $rc; stderr: $(tail -5 "$err"))" $([ $rc = 0 ]; echo $?)
check "memcpy ceiling line" $(grep -q '^# memcpy bandwidth' "$out"; echo $?)
check "table header" $(grep -q 'time(us) *algbw(GB/s) *busbw(GB/s) *vs torch' "$out"; echo $?)
check "all_reduce table" $(grep -q '^## all_reduce, 2 ranks' "$out"; echo $?)
check "reduce_scatter table" $(grep -q '^## reduce_scatter, 2 ranks' "$out"; echo $?)
check "loom:gloo and loom:tcp rows" $(grep -Eq '^ +4 KiB  loom:tcp +[0-9.]+ ' "$out" &&
                                      grep -Eq '^ +1 KiB  loom:gloo +[0-9.]+ ' "$out"; echo $?)
check "verification line" $(grep -Eq '^verification: ok: all 8 results correct on every rank' "$out"; echo $?)
check "says why there is no torch column" $(grep -q '^# no torch column: --torch=0' "$out"; echo $?)
else

timeout -k 5 50 "$BIN" --backends=tcp --ranks=2 --min-bytes=1K --max-bytes=1K --iters=2 --torch=0 \
    --channels=2 --json >"$out" 2>"$err"
rc=$?
check "json run exits 0 (got $rc)" $([ $rc = 0 ]; echo $?)
check "json verified" $(grep -q '"verified": true' "$out"; echo $?)
check "json parses" $(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["results"]) == 3' "$out"; echo $?)

timeout -k 5 20 "$BIN" --ranks=2 --bogus-flag=3 >"$out" 2>"$err"
rc=$?
check "bad flag exits 2 (got $rc)" $([ $rc = 2 ]; echo $?)
check "bad flag is named" $(grep -q 'unknown flag --bogus-flag' "$err"; echo $?)
timeout -k 5 20 "$BIN" --ranks=x >"$out" 2>"$err"
rc=$?
check "bad value exits 2 (got $rc)" $([ $rc = 2 ]; echo $?)
check "bad value names the flag" $(grep -q -- '--ranks: ' "$err"; echo $?)
fi

rm -f "$out" "$err"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
