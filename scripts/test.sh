#!/usr/bin/env bash
# The test command: installs dependencies, checks formatting, builds, runs the
# whole test suite, compiles the CUDA configuration, then runs the process-level tests
# again under ASan and UBSan, the threaded torch-free ones under ThreadSanitizer, and fuzzes
# the parsers of outside input for FUZZ_SECONDS (default 30) each.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/check_format.sh
bash scripts/build.sh -DSACCADE_WERROR=ON
ctest --test-dir build --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900
bash scripts/check_cuda.sh
bash scripts/check_sanitizers.sh
bash scripts/check_sanitizers.sh --thread
bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
