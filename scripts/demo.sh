#!/usr/bin/env bash
# The demo command: installs dependencies, builds, then runs the demo job through the
# product's real path: `saccade run configs/demo.toml` starts the coordinator and one agent
# on this machine, and the coordinator runs every stage of the job: sequential-to-global
# DINO pretraining on Fashion-MNIST items placed anywhere on a 60 x 60 cluttered canvas (a
# data actor and a learner), the probe of the frozen teacher (k-NN and linear after each
# random glimpse, beside its random initialisation, and the transformer task head), GRPO
# for the gaze policy against that frozen backbone and head (beside random gazes, a
# centre-first scan and the best fixed path), then the evaluation of every gaze mode. It
# ends with the closing table (scripts/demo_table.py) and the plots.
# `saccade status --config configs/demo.toml --watch` shows the job while it runs.
# Arguments go to `saccade run` (e.g. --fresh to start over: a finished job does not run
# again).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/saccade info
./build/saccade config check configs/*.toml
./build/saccade run configs/demo.toml "$@"
# Debian's python3 has matplotlib (install-deps.sh); a pyenv python3 on PATH may not.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# runs/demo/learning_knn.png, probe_glimpses.png, policy_training.png (GRPO's validation
# curve), eval_glimpses.png and eval_resolution.png, and every stage's table.
"$PY" scripts/plot_learning.py runs/demo
"$PY" scripts/demo_table.py runs/demo
