#!/usr/bin/env bash
# scripts/check_layers.sh passes on this checkout and fails, naming the file, on a
# tree where workers/ includes coordinator/, model/ includes a data loader header or
# the coordinator's supervisor includes a socket library.
# Usage: check_layers_test.sh CHECK_LAYERS SOURCE_ROOT
set -uo pipefail
CHECK=$1
ROOT=$2
bash "$CHECK" "$ROOT" || { echo "check_layers_test: this checkout fails the check" >&2; exit 1; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/workers/learner" "$D/model" "$D/coordinator"
echo '#include "coordinator/agent.h"' > "$D/workers/learner/a.cpp"
echo '#include "dataloader/views.h"' > "$D/model/b.h"
echo '#include <zmq.hpp>' > "$D/coordinator/supervisor.cpp"
out=$(bash "$CHECK" "$D" 2>&1)
rc=$?
[ "$rc" -eq 1 ] || { echo "check_layers_test: exit $rc on a bad tree, expected 1" >&2; exit 1; }
for f in workers/learner/a.cpp model/b.h coordinator/supervisor.cpp; do
  grep -q "$f" <<<"$out" || { echo "check_layers_test: $f not named: $out" >&2; exit 1; }
done
echo "check_layers_test: ok"
