#!/usr/bin/env bash
# The policy stage's ablations (docs/policy.md, "Rewards and the fixed path"): GRPO
# against the frozen backbone and transformer head of
# configs/ablations/tiny-transformer-head.toml (run that job first), one
# one-process `saccade policy` per variant, each in runs/ablations/<variant>
# with the same budget, seeds and validation images:
#   probability    policy.reward = "probability" (the default, the paper's)
#   increase       policy.reward = "increase"
#   final_correct  policy.reward = "final_correct"
#   fixed_path     policy.sees_state = false: the learned fixed path
# Usage: bash scripts/policy_ablations.sh [VARIANT...]   (default: all four)
# SACCADE=path/to/saccade picks another build (default build/saccade).
# Prints each variant's validation top-1 per glimpse (policy, random, scan).
set -euo pipefail
cd "$(dirname "$0")/.."
base=configs/ablations/tiny-transformer-head.toml
input=runs/tiny-transformer-head
[[ -f "$input/probe_head.safetensors" ]] || {
  echo "policy_ablations: $input/probe_head.safetensors is missing: run" \
    "build/saccade run $base first" >&2
  exit 2
}
variants=("$@")
[[ ${#variants[@]} -gt 0 ]] || variants=(probability increase final_correct fixed_path)
mkdir -p runs/ablations
for v in "${variants[@]}"; do
  case "$v" in
    probability | increase | final_correct) key="reward = \"$v\"" ;;
    fixed_path) key="sees_state = false" ;;
    *)
      echo "policy_ablations: unknown variant \"$v\" (probability, increase, final_correct," \
        "fixed_path)" >&2
      exit 2
      ;;
  esac
  config=runs/ablations/$v.toml
  sed -e "0,/^name = /s|^name = .*|name = \"policy-$v\"|" \
    -e "s|^work_dir = .*|work_dir = \"runs/ablations/$v\"|" \
    -e "s|^stages = .*|stages = [\"policy\"]|" \
    -e "/^\[policy\]/a input_dir = \"$input\"\n$key" "$base" >"$config"
  echo "== $v ($config; log runs/ablations/$v.log)"
  start=$(date +%s)
  "${SACCADE:-build/saccade}" policy "$config" >"runs/ablations/$v.log" 2>&1
  # The command's table (stdout lines; the log's other lines are spdlog's, stamped).
  grep -v '^\[' "runs/ablations/$v.log"
  echo "  $(($(date +%s) - start)) s"
done
