#!/usr/bin/env bash
# Command 1 of the README: installs what is missing, builds the `loom` binary and
# runs Loom's main job on this machine with the embedded defaults: the 2D
# (tp=2 x dp=2) GPT example through `loom run` (a coordinator and an agent in
# one process, four worker processes). Other arguments go to `loom` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "building loom..."
# Debian's Bazel passes the sandbox's debug lines through; they are noise here.
bazel build --color=no --curses=no --noshow_progress //runtime:loom 2>&1 |
  grep -vE '^(INFO|Loading|Analyzing)|src/main/tools/linux-sandbox' || true
LOOM="$(bazel info bazel-bin 2>/dev/null)/runtime/loom"
[ -x "$LOOM" ] || { echo "build failed: $LOOM missing" >&2; exit 1; }
if [ $# -eq 0 ]; then set -- run examples/gpt-2d.yaml; fi
exec "$LOOM" "$@"
