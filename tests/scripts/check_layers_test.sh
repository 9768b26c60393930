#!/usr/bin/env bash
# scripts/check_layers.sh passes on this checkout and fails, naming the file, on a
# tree where workers/ includes coordinator/, model/ includes a data loader header or
# the coordinator's supervisor includes a socket library, the probe, policy or eval
# includes workers/pretrain/, workers/pretrain/ includes the data plane,
# saccade_pretrain links it, the data plane includes torch, an adapter the probe
# includes includes workers/pretrain/, or a stage's component reads the job config.
# Usage: check_layers_test.sh CHECK_LAYERS SOURCE_ROOT
set -uo pipefail
CHECK=$1
ROOT=$2
bash "$CHECK" "$ROOT" || { echo "check_layers_test: this checkout fails the check" >&2; exit 1; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/workers/learner" "$D/model" "$D/coordinator" "$D/workers/probe" "$D/workers/policy" \
  "$D/workers/eval" "$D/workers/pretrain" "$D/workers/data_plane"
echo '#include "coordinator/agent.h"' > "$D/workers/learner/a.cpp"
echo '#include "dataloader/views.h"' > "$D/model/b.h"
echo '#include <zmq.hpp>' > "$D/coordinator/supervisor.cpp"
for part in probe policy eval; do
  echo '#include "workers/pretrain/pretrain_job.h"' > "$D/workers/$part/c.cpp"
done
echo '#include "workers/data_plane/batch_client.h"' > "$D/workers/pretrain/d.cpp"
printf 'saccade_add_library(saccade_pretrain\n  SOURCES d.cpp\n  PUBLIC_LIBS saccade_common\n              saccade_data_plane)\n' \
  > "$D/workers/pretrain/CMakeLists.txt"
echo '#include <torch/torch.h>' > "$D/workers/data_plane/e.cpp"
mkdir -p "$D/workers/job_options"
echo '#include "workers/pretrain/knn_monitor.h"' > "$D/workers/job_options/probe_options.h"
echo '#include "common/config.h"' > "$D/workers/probe/f.h"
echo 'void g(const JobConfig& config);' > "$D/workers/policy/g.cpp"
echo 'void g(const JobConfig& config);' > "$D/workers/policy/policy_job.cpp"  # a job: allowed
out=$(bash "$CHECK" "$D" 2>&1)
rc=$?
[ "$rc" -eq 1 ] || { echo "check_layers_test: exit $rc on a bad tree, expected 1" >&2; exit 1; }
for f in workers/learner/a.cpp model/b.h coordinator/supervisor.cpp workers/probe/c.cpp \
  workers/policy/c.cpp workers/eval/c.cpp workers/pretrain/d.cpp \
  "workers/pretrain/CMakeLists.txt:4:" workers/data_plane/e.cpp workers/job_options/probe_options.h \
  workers/probe/f.h workers/policy/g.cpp; do
  grep -q "$f" <<<"$out" || { echo "check_layers_test: $f not named: $out" >&2; exit 1; }
done
if grep -q "policy_job.cpp" <<<"$out"; then
  echo "check_layers_test: a job named for reading the config: $out" >&2
  exit 1
fi
echo "check_layers_test: ok"
