#!/usr/bin/env bash
# The demo command: installs dependencies, builds, and runs the main job.
# Today the main job is single-process sequential-to-global DINO pretraining of
# the tiny preset on Fashion-MNIST (configs/tiny.toml), after a quick run of
# the extraction benchmark, then the linear probe of the pretrained teacher on
# the first 10,000 training and 2,000 test images, then the gaze policy trained
# with GRPO against that frozen backbone and head on 10,000 training images and
# compared with random gazes on 2,000 test images; later stages (evaluation,
# the distributed `saccade run`) extend it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/saccade info
./build/saccade config check configs/*.toml
./build/saccade bench extract --quick --no-photos
./build/saccade pretrain configs/tiny.toml "$@"
./build/saccade probe configs/tiny.toml
# Debian's python3 has matplotlib (install-deps.sh); a pyenv python3 on PATH may not.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
"$PY" scripts/plot_learning.py runs/tiny  # runs/tiny/learning_knn.png, probe_glimpses.png
./build/saccade policy configs/tiny.toml --max-train-images 10000 --max-val-images 2000
