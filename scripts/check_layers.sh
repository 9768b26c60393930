#!/usr/bin/env bash
# The import arrows point one way (docs/building.md, "Layout"): fails naming every
# #include that crosses a layer the wrong way. Run by ctest (Layers.*).
# Usage: check_layers.sh [SOURCE_ROOT] (default: this checkout)
#   kernels/      knows nothing of the model, data loading or the runtime
#   model/        knows nothing of data loading, processes or the wire
#   common/ schemas/ storage/ control/ coordinator/ workers/runtime/: torch-free
#   workers/data_plane/ and the config's torch-free adapters (workers/job_options/
#                 data_options, link_options, remote_batch_options): torch-free (data actors)
#   workers/probe/ workers/policy/ workers/eval/: never include workers/pretrain/
#                 (the teacher backbone is workers/teacher/, the config's options
#                 workers/job_options/, view tensors workers/ssl/)
#   workers/job_options/: only pretrain_options includes workers/pretrain/ (the
#                 probe, policy and eval include the others)
#   workers/{probe,policy,eval,pretrain,data_plane,learner}/: only the jobs
#                 (*_job.*, policy_stage.h) and actor bodies (*_actor(s).cpp) name
#                 JobConfig or include common/config.h; components take option structs
#   workers/pretrain/: no workers/data_plane/ include, and the saccade_pretrain target
#                 links no data plane or socket library (`saccade pretrain` is one process)
#   workers/      never includes coordinator/ (what they share is control/)
#   coordinator/  never includes workers/
#   coordinator/{supervisor,stage_runner,peer_messages}: no sockets, no processes
#                 (their peers are a PeerSender, so their decisions test without them)
set -uo pipefail
cd "${1:-$(dirname "$0")/..}"
bad=0
# forbid DIRS PATTERN WHY: no file under DIRS may #include a match of PATTERN.
forbid() {
  local dirs=$1 pattern=$2 why=$3 hits
  # shellcheck disable=SC2086
  hits=$(grep -rHnE "^#include [<\"]($pattern)" $dirs --include='*.h' --include='*.cpp' \
    --include='*.cu' --include='*.cuh' 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "check_layers: $why:" >&2
    echo "$hits" | sed 's/^/  /' >&2
    bad=1
  fi
}
forbid "kernels" "model/|dataloader/|workers/|coordinator/|control/|rl/|schemas/|storage/|torch/|ATen/" \
  "kernels/ must not know the model, data loading, the runtime or torch"
forbid "model" "dataloader/|workers/|coordinator/|control/|schemas/|storage/" \
  "model/ must not know data loading, processes or the wire"
forbid "common schemas storage control coordinator workers/runtime" "torch/|ATen/|c10/|model/" \
  "the control plane and the actor runtime must stay torch-free"
forbid "workers" "coordinator/" "workers/ must include control/, not coordinator/"
forbid "coordinator control" "workers/" "the coordinator and control/ must not know the actors"
torch_free_data="workers/data_plane workers/job_options/data_options.h workers/job_options/data_options.cpp
  workers/job_options/link_options.h workers/job_options/link_options.cpp
  workers/job_options/remote_batch_options.h workers/job_options/remote_batch_options.cpp"
forbid "$torch_free_data" "torch/|ATen/|c10/|model/" \
  "data actors run without LibTorch: the data plane and its options stay torch-free"
forbid "workers/probe workers/policy workers/eval" "workers/pretrain/" \
  "probe, policy and eval must not include workers/pretrain/ (the teacher backbone is
  workers/teacher/, the config's options workers/job_options/, view tensors workers/ssl/)"
forbid "workers/pretrain" "workers/data_plane/" "workers/pretrain/ must not know the data plane"
job_options_but_pretrain=$(find workers/job_options -name '*.h' -o -name '*.cpp' 2>/dev/null | sort |
  grep -v '/pretrain_options\.')
forbid "$job_options_but_pretrain" "workers/pretrain/" \
  "the config's adapters that probe, policy and eval include must not include workers/pretrain/
  (the k-NN check's options are workers/job_options/pretrain_options.h)"
# The components of the stages take option structs (workers/job_options/): only the jobs and
# the actor bodies, which orchestrate a stage, read the job config.
components=$(find workers/probe workers/policy workers/eval workers/pretrain workers/data_plane \
  workers/learner \( -name '*.h' -o -name '*.cpp' \) 2>/dev/null | sort |
  grep -vE '_job\.(h|cpp)$|_actors?\.cpp$|/policy_stage\.h$')
if [ -n "$components" ]; then
  # shellcheck disable=SC2086
  hits=$(grep -nE '^#include "common/config\.h"|\bJobConfig\b' $components)
  if [ -n "$hits" ]; then
    echo "check_layers: only the jobs (*_job.*, policy_stage.h) and actor bodies (*_actor(s).cpp)" \
      "read the job config; components take options from workers/job_options/:" >&2
    echo "$hits" | sed 's/^/  /' >&2
    bad=1
  fi
fi
# forbid_link TARGET PATTERN WHY: no CMakeLists.txt may link TARGET to a match of PATTERN
# (in its saccade_add_library(TARGET ...) or a target_link_libraries(TARGET ...)).
forbid_link() {
  local target=$1 pattern=$2 why=$3 hits
  hits=$(find . -name CMakeLists.txt -not -path './build*' 2>/dev/null | sort | while read -r f; do
    awk -v t="$target" -v f="${f#./}" '
      $0 ~ "(saccade_add_library|target_link_libraries)\\(" t "([[:space:]]|$)" { on = 1 }
      on { print f ":" FNR ": " $0 }
      on && /\)[[:space:]]*$/ { on = 0 }' "$f"
  done | grep -E "$pattern")
  if [ -n "$hits" ]; then
    echo "check_layers: $why:" >&2
    echo "$hits" | sed 's/^/  /' >&2
    bad=1
  fi
}
forbid_link saccade_pretrain "saccade_data_plane|saccade_remote_batch_options|saccade_control|zmq" \
  "saccade_pretrain links no data plane or socket library"
decisions="coordinator/supervisor.h coordinator/supervisor.cpp coordinator/stage_runner.h
  coordinator/stage_runner.cpp coordinator/peer_messages.h coordinator/peer_messages.cpp"
forbid "$decisions" "zmq|control/process.h|coordinator/coordinator.h" \
  "the coordinator's decisions reach peers through PeerSender, not sockets or processes"
if [ "$bad" -ne 0 ]; then exit 1; fi
echo "check_layers: the import arrows point one way"
