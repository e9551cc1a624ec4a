#!/bin/bash
# The GPU machine's parallel_cuda_gpu_check, run here on the CPU
# (--device=cpu, 3 steps, four layouts, both families): its rank processes,
# their loss files and the comparison with the one-rank run work, so the
# check does not rot between GPU runs. Bad usage is exit 2 naming the flag.
# Usage: parallel_cuda_gpu_check_dry_test.sh BINARY
set -u
bin=$1
out=$(timeout 240 "$bin" --device=cpu --steps=3 --layouts=dp2,tp2xdp2,tp2sp,zero3 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: exit $rc"; exit 1; }
echo "$out" | grep -q '^parallel cuda parity: 8 passed, 0 failed$' || { echo "FAIL: no '8 passed, 0 failed' line"; exit 1; }
[ "$(echo "$out" | grep -c '^  PASS  ')" = 16 ] || { echo "FAIL: expected 16 PASS lines (8 cases and the summary)"; exit 1; }
bad=$("$bin" --layouts=dp3 2>&1)
rc=$?
[ $rc = 2 ] && echo "$bad" | grep -q "unknown layout 'dp3'" || { echo "FAIL: --layouts=dp3: exit $rc: $bad"; exit 1; }
echo "PASS"
