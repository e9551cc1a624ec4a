#!/bin/sh
# Runs deploy/test/manifest_test.py with Debian's python (PyYAML) over deploy/,
# plus the child objects `loom_operator --render` makes for each sample
# TrainingJob (validated with the same object rules).
set -e
cd "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-loom}" 2>/dev/null || true
out="${TEST_TMPDIR:-/tmp}"
extra=""
for f in deploy/overlays/*/trainingjob-*.yaml; do
  name=$(basename "$f" .yaml)
  deploy/operator/loom_operator --render "$f" --namespace loom > "$out/$name.children.json"
  extra="$extra $out/$name.children.json"
done
exec /usr/bin/python3 deploy/test/manifest_test.py deploy $extra
