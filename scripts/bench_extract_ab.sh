#!/usr/bin/env bash
# A/B of two extraction kernels in one sitting: alternates two bench_extract binaries
# (e.g. one built before a kernel change, one after) so host noise hits both alike, and
# prints the integral and pyramid us per patch, 1 thread, at each size.
#   bash scripts/bench_extract_ab.sh OLD_BIN NEW_BIN [MORE_BINS...]
# Env: SACCADE_AB_RUNS (default 3), SACCADE_AB_SIZES (default 256,1024,2048,4096,8192),
#      SACCADE_AB_WARM=1 (the same gazes every repetition instead of fresh ones).
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OLD_BENCH_EXTRACT NEW_BENCH_EXTRACT [MORE...]" >&2
  exit 2
fi
for bin in "$@"; do
  [[ -x $bin ]] || { echo "bench_extract_ab: '$bin' is not an executable bench_extract" >&2; exit 2; }
done
runs=${SACCADE_AB_RUNS:-3}
sizes=${SACCADE_AB_SIZES:-256,1024,2048,4096,8192}
gazes=(--fresh-gazes)
[[ ${SACCADE_AB_WARM:-0} == 1 ]] && gazes=()
if ((${#gazes[@]})); then mode=fresh; else mode=warm; fi
echo "# $mode gazes, 1 thread; per size: integral_us pyramid_us"
for ((r = 1; r <= runs; ++r)); do
  for bin in "$@"; do
    printf '%s run %d:' "$bin" "$r"
    "$bin" --table --no-photos --threads 1 "${gazes[@]}" --no-baseline --accuracy-patches 0 \
      --sizes "$sizes" | awk '$1 == "synthetic" {printf "  %s %s %s", $2, $7, $9}'
    echo
  done
done
