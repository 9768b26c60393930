#!/usr/bin/env bash
# The policy stage's ablations (results/policy.md, "No reward makes the policy beat the learned fixed path on the demo's backbone"): GRPO
# against the frozen backbone and task head of a finished job (BASE, default
# configs/ablations/policy/tiny-transformer-head.toml: run that job first), one
# one-process `saccade policy` per variant, each in $OUT/<job>-<variant> (OUT default
# runs/ablations) with the same budget, seeds and validation images:
#   probability    policy.reward = "probability" (the default, the paper's)
#   increase       policy.reward = "increase"
#   final_correct  policy.reward = "final_correct"
#   fixed_path     policy.sees_state = false: the learned fixed path alone
#   KEY=VALUE[,KEY=VALUE...]  other [policy] keys, e.g. group_size=8, std_start=0.3,
#                  kl_beta=0.1, fixed_path_baseline=false (every variant's report has its
#                  own learned fixed path unless this turns it off); a bare word is a
#                  string (reward=increase is reward = "increase"; scripts/config_variant.sh)
# Usage: [BASE=CONFIG] bash scripts/policy_ablations.sh [VARIANT...]
#   (default variants: probability increase final_correct fixed_path)
# SACCADE=path/to/saccade picks another build (default build/saccade). A second BASE whose
# job.name equals the first's is refused (its variants would overwrite the first's folders).
# Prints each variant's validation top-1 per glimpse (policy, random, scan).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-configs/ablations/policy/tiny-transformer-head.toml}
[[ -f "$base" ]] || {
  echo "policy_ablations: BASE=$base: no such config" >&2
  exit 2
}
source scripts/config_variant.sh
# The resolved keys: BASE may include its own base.
job=$(config_value "$base" job name)
input=$(config_value "$base" job work_dir)
[[ -n "$job" && -n "$input" ]] || {
  echo "policy_ablations: $base: cannot read job.name and job.work_dir" >&2
  exit 2
}
[[ -f "$input/probe_head.safetensors" ]] || {
  echo "policy_ablations: $input/probe_head.safetensors is missing: run" \
    "build/saccade run $base first" >&2
  exit 2
}
variants=("$@")
[[ ${#variants[@]} -gt 0 ]] || variants=(probability increase final_correct fixed_path)
out=${OUT:-runs/ablations}
mkdir -p "$out"
for v in "${variants[@]}"; do
  case "$v" in
    probability | increase | final_correct) pairs=("reward=$v") ;;
    fixed_path) pairs=("sees_state=false") ;;
    [a-z]*=*)
      # [policy] keys: config_variant quotes a bare word (reward=increase) and the config
      # check refuses an unknown key or a bad value by name.
      IFS=',' read -r -a pairs <<<"$v"
      v=$(echo "$v" | tr -d '"' | tr '=.,' '-p_')
      ;;
    *)
      echo "policy_ablations: unknown variant \"$v\" (probability, increase, final_correct," \
        "fixed_path or a [policy] KEY=VALUE)" >&2
      exit 2
      ;;
  esac
  dir=$out/$job-$v
  config=$dir.toml
  # Two BASE configs with the same job.name would share $dir and overwrite each other's
  # report: each variant's dir remembers the BASE that wrote it.
  owner=$(realpath "$base")
  if [[ -f "$dir.base" && $(cat "$dir.base") != "$owner" ]]; then
    echo "policy_ablations: $dir was written for BASE=$(cat "$dir.base"), and BASE=$owner has" \
      "the same job.name \"$job\": set OUT to another folder or give the job another name" >&2
    exit 2
  fi
  echo "$owner" >"$dir.base"
  config_variant "$base" "$config" "job.name=$job-$v" "job.work_dir=$dir" 'job.stages=["policy"]' \
    "policy.input_dir=$input" "${pairs[@]/#/policy.}"
  echo "== $v ($config; log $dir.log)"
  start=$(date +%s)
  if ! "${SACCADE:-build/saccade}" policy "$config" >"$dir.log" 2>&1; then
    echo "policy_ablations: $v failed; the end of $dir.log:" >&2
    tail -n 5 "$dir.log" >&2
    exit 1
  fi
  # The command's table (stdout lines; the log's other lines are spdlog's, stamped).
  grep -v '^\[' "$dir.log" || true
  echo "  $(($(date +%s) - start)) s"
done
