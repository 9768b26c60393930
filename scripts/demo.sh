#!/usr/bin/env bash
# The demo command: installs dependencies, builds, and runs the main job.
# Today the main job is the foundation's: validate the shipped job configs and
# report the build; later stages extend this script (see README "Status").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/saccade info
./build/saccade config check configs/*.toml
if ./build/saccade bench --help >/dev/null 2>&1; then
  ./build/saccade bench extract --quick
fi
