#!/usr/bin/env bash
# Pretraining ablations (results/ssl.md, "Objective ablations at 500 steps"): one-process
# `saccade pretrain --fresh --steps STEPS` of BASE (default
# configs/ablations/glimpse-recipe/glimpse-m099.toml, the glimpse recipe with its faster teacher)
# per variant, each with one or more keys changed, in OUT/<job>-<variant> (OUT
# default runs/ablations).
# The schedules stay BASE's (the first STEPS steps of its budget), so every
# variant is compared with BASE at the same steps by the held-apart k-NN check
# (ssl.knn_every_steps) that the log prints.
#   SECTION.KEY=VALUE[,SECTION.KEY=VALUE...]  e.g. ssl.teacher_centering=ema,
#                  ssl.koleo_weight=0, views.local_views=8, ssl.lr=0.004 (a bare word is a
#                  string; each variant includes BASE: scripts/config_variant.sh)
#   base           BASE unchanged
# Usage: [BASE=CONFIG] [STEPS=N] [PROBE=1] bash scripts/ssl_ablations.sh VARIANT...
#   PROBE=1 also runs `saccade probe` on each (the reference protocol; ~10 min).
# SACCADE=path/to/saccade picks another build (default build/saccade).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-configs/ablations/glimpse-recipe/glimpse-m099.toml}
steps=${STEPS:-1000}
saccade=${SACCADE:-build/saccade}
out=${OUT:-runs/ablations}
[[ -f "$base" ]] || {
  echo "ssl_ablations: BASE=$base: no such config" >&2
  exit 2
}
source scripts/config_variant.sh
job=$(config_value "$base" job name)  # resolved: BASE may include its own base
[[ -n "$job" ]] || {
  echo "ssl_ablations: $base: cannot read job.name" >&2
  exit 2
}
[[ $# -gt 0 ]] || {
  echo "usage: [BASE=CONFIG] [STEPS=N] [PROBE=1] bash scripts/ssl_ablations.sh" \
    "base|SECTION.KEY=VALUE[,...]..." >&2
  exit 2
}
mkdir -p "$out"
for v in "$@"; do
  pairs=()
  name=base
  if [[ "$v" != base ]]; then
    name=""
    IFS=',' read -r -a pairs <<<"$v"
    for pair in "${pairs[@]}"; do
      [[ "$pair" =~ ^([a-z_]+)\.([a-z_]+)=(.+)$ ]] || {
        echo "ssl_ablations: variant \"$pair\": expected SECTION.KEY=VALUE" >&2
        exit 2
      }
      name+=${name:+_}${BASH_REMATCH[2]}-$(echo "${BASH_REMATCH[3]}" | tr -d '"' | tr '.' 'p')
    done
  fi
  v=$name
  dir=$out/$job-$v
  config=$dir.toml
  # A bad key or value is refused here, by name, before anything runs.
  config_variant "$base" "$config" "job.name=$job-$v" "job.work_dir=$dir" "${pairs[@]}"
  echo "== $v ($config; log $dir.log)"
  start=$(date +%s)
  "$saccade" pretrain "$config" --fresh --steps "$steps" >"$dir.log" 2>&1
  # The held-apart k-NN checks: ViT mode, after the glimpses, target entropy, prototypes.
  grep -o 'step [0-9]* k-NN.*' "$dir.log" || true
  echo "  pretrain $(($(date +%s) - start)) s"
  if [[ "${PROBE:-0}" == 1 ]]; then
    "$saccade" probe "$config" >"$dir.probe.log" 2>&1
    grep -v '^\[' "$dir.probe.log" || true
  fi
done
