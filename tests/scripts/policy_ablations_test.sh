#!/usr/bin/env bash
# scripts/policy_ablations.sh's variants: a bare word becomes a TOML string and numbers
# stay numbers, each key overrides the base's in [policy] (the variant includes it), and a variant whose run
# fails stops the script with the run's own error (here a probe head that is not one)
# instead of an empty table; an unknown variant is refused before anything runs, and so is a
# second BASE whose job.name would put its report in the first one's folder.
set -euo pipefail
saccade="$1" script="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/tiny_job_lib.sh"
mkdir -p "$dir/base-run"
echo "not a safetensors file" >"$dir/base-run/probe_head.safetensors"
{
  printf '[job]\nname = "pabl"\nwork_dir = "%s"\n' "$dir/base-run"
  printf 'stages = ["pretrain", "probe", "policy", "eval"]\n'
  tiny_fmnist_sections
  printf '[policy]\nreward = "probability"\ngroup_size = 4\nepochs = 1\n'
  printf '[logging]\nprogress = false\n'
  # A job whose stages include policy needs a rollout actor (the variant runs that stage).
  printf '[[cluster.nodes]]\nname = "local"\nhost = "127.0.0.1"\nrollout_actors = 1\n'
} >"$dir/base.toml"
fail() {
  echo "policy_ablations_test: $*" >&2
  exit 1
}
export BASE="$dir/base.toml" OUT="$dir/out" SACCADE="$saccade"
if bash "$script" 'reward=increase,group_size=8' >"$dir/out.txt" 2>&1; then
  fail "a variant on a broken probe head succeeded"
fi
config="$dir/out/pabl-reward-increase_group_size-8.toml"
[[ -f "$config" ]] || { cat "$dir/out.txt" >&2; fail "no $config"; }
policy=$(sed -n '/^\[policy\]/,/^\[/p' "$config")
grep -q '^reward = "increase"$' <<<"$policy" || fail "reward not quoted: $(grep reward "$config")"
[[ $(grep -c '^reward = ' "$config") == 1 ]] || fail "more than one reward line"
"$saccade" config show "$config" | sed -n '/^\[policy\]/,/^\[/p' | grep '^epochs = 1 ' >/dev/null || fail "the base's [policy] keys are lost"
grep -q '^group_size = 8$' <<<"$policy" || fail "group_size not 8: $(grep group_size "$config")"
grep -q "^input_dir = \"$dir/base-run\"$" <<<"$policy" || fail "input_dir is not the base's work_dir"
grep -q 'policy_ablations: reward-increase_group_size-8 failed' "$dir/out.txt" ||
  { cat "$dir/out.txt" >&2; fail "the failure was not reported"; }
grep -q 'probe_head.safetensors' "$dir/out.txt" ||
  { cat "$dir/out.txt" >&2; fail "the run's own error (naming the head file) was not shown"; }
# The variant runs the policy stage alone: a base whose eval stage evaluates the learned
# fixed path still takes fixed_path_baseline=false (it fails at the head, not the config).
if bash "$script" 'fixed_path_baseline=false' >"$dir/nofp.txt" 2>&1; then fail "ran on a broken head"; fi
grep -q 'probe_head.safetensors' "$dir/nofp.txt" ||
  { cat "$dir/nofp.txt" >&2; fail "fixed_path_baseline=false was refused before the run"; }
# Another BASE with the same job.name would overwrite that variant's report: refused, naming
# both; the first BASE may still re-run it.
cp "$dir/base.toml" "$dir/other-base.toml"
if BASE="$dir/other-base.toml" bash "$script" 'fixed_path_baseline=false' >"$dir/same.txt" 2>&1; then
  fail "a second BASE with the same job.name ran into the first one's folder"
fi
grep -q "was written for BASE=$dir/base.toml.*BASE=$dir/other-base.toml has the same job.name" \
  "$dir/same.txt" || { cat "$dir/same.txt" >&2; fail "the shared folder was not refused by name"; }
if bash "$script" 'fixed_path_baseline=false' >"$dir/again.txt" 2>&1; then fail "ran on a broken head"; fi
grep -q 'probe_head.safetensors' "$dir/again.txt" ||
  { cat "$dir/again.txt" >&2; fail "the same BASE could not re-run its variant"; }
if bash "$script" 'no such variant' >"$dir/bad.txt" 2>&1; then fail "an unknown variant ran"; fi
grep -q 'unknown variant' "$dir/bad.txt" || { cat "$dir/bad.txt" >&2; fail "unknown variant not named"; }
echo "policy_ablations_test: ok"
