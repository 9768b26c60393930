#!/usr/bin/env bash
# The demo command: installs dependencies, builds, runs a quick extraction
# benchmark, then the demo job through the product's real path: `saccade run
# configs/tiny.toml` starts the coordinator and one agent on this machine, and
# the coordinator runs every stage of job.stages in one job: sequential-to-
# global DINO pretraining of the tiny preset on Fashion-MNIST (a data actor and
# a learner), the probe of the pretrained teacher on the first 10,000 training
# and 2,000 test images (k-NN and linear, beside the random init and raw
# pixels), then the gaze policy trained with GRPO against that frozen backbone
# and head (a policy learner and a rollout actor), compared with random gazes
# and a fixed scan path, then the evaluation of all three (every mode after
# each of 8 glimpses, and the resolution sweep x1..x8 against a fixed-patch
# ViT). It ends with the results tables and plots.
# `saccade status --config configs/tiny.toml` shows the job while it runs.
# Arguments go to `saccade run` (e.g. --fresh to start over: a finished job
# does not run again).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/saccade info
./build/saccade config check configs/*.toml
./build/saccade bench extract --quick --no-photos
./build/saccade run configs/tiny.toml "$@"
# Debian's python3 has matplotlib (install-deps.sh); a pyenv python3 on PATH may not.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# The tables, runs/tiny/learning_knn.png, probe_glimpses.png, policy_training.png (GRPO's
# validation curve), eval_glimpses.png and eval_resolution.png.
"$PY" scripts/plot_learning.py runs/tiny
