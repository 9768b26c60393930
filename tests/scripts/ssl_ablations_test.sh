#!/usr/bin/env bash
# scripts/ssl_ablations.sh on a tiny Fashion-MNIST config: a two-key variant
# includes the base and overrides its keys (one line per key, in the right section),
# pretrains STEPS steps and prints the held-apart k-NN checks; a bad key or section is
# refused by name before anything runs; a bare word is a string.
set -euo pipefail
saccade="$1" script="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/tiny_job_lib.sh"
{
  printf '[job]\nname = "abl"\nwork_dir = "%s"\n' "$dir/base-run"
  tiny_fmnist_sections
  cat <<TOML
[ssl]
epochs = 1
steps_per_epoch = 4
batch_size = 8
koleo_weight = 0.1
head_prototypes = 32
head_hidden = 32
head_bottleneck = 8
threads = 1
knn_every_steps = 2
knn_bank_images = 64
knn_query_images = 32
[probe]
glimpses = 2
[logging]
progress = false
TOML
} >"$dir/base.toml"
fail() {
  echo "ssl_ablations_test: $*" >&2
  exit 1
}
export BASE="$dir/base.toml" OUT="$dir/out" STEPS=2 SACCADE="$saccade"
bash "$script" 'ssl.koleo_weight=0,views.local_views=2' > "$dir/out.txt" 2>&1 ||
  { cat "$dir/out.txt" >&2; fail "the variant run failed"; }
config="$dir/out/abl-koleo_weight-0_local_views-2.toml"
[[ -f "$config" ]] || { cat "$dir/out.txt" >&2; fail "no $config"; }
[[ $(grep -c '^koleo_weight = ' "$config") == 1 ]] && grep -q '^koleo_weight = 0$' "$config" ||
  fail "koleo_weight not replaced: $(grep koleo_weight "$config")"
sed -n '/^\[views\]/,/^\[/p' "$config" | grep -q '^local_views = 2$' ||
  fail "views.local_views = 2 is not in [views]"
grep -q "^work_dir = \"$dir/out/abl-koleo_weight-0_local_views-2\"" "$config" ||
  fail "work_dir not moved to the variant's folder"
grep -q '^step 2 k-NN' "$dir/out.txt" || { cat "$dir/out.txt" >&2; fail "no k-NN check printed at step 2"; }
# The run used the variant's config: its checkpoint store is in the variant's folder.
[[ -d "$dir/out/abl-koleo_weight-0_local_views-2" ]] || fail "the variant's work_dir is missing"

if bash "$script" 'ssl.no_such_key=1' > "$dir/bad.txt" 2>&1; then fail "a bad key ran"; fi
grep -q 'ssl.no_such_key: unknown key' "$dir/bad.txt" || { cat "$dir/bad.txt" >&2; fail "bad key not named"; }
[[ ! -e "$dir/out/abl-no_such_key-1" ]] || fail "a refused variant left a run folder"
if bash "$script" 'nosuch.steps=2' > "$dir/bad.txt" 2>&1; then fail "an unknown section ran"; fi
grep -q 'nosuch: unknown key' "$dir/bad.txt" || { cat "$dir/bad.txt" >&2; fail "unknown section not named"; }
# A bare word is a string, and a section BASE does not write takes the key: the variant
# includes BASE and holds only its own keys.
STEPS=1 bash "$script" 'ssl.teacher_centering=ema,policy.steps=2' > "$dir/str.txt" 2>&1 ||
  { cat "$dir/str.txt" >&2; fail "a string-valued variant failed"; }
config="$dir/out/abl-teacher_centering-ema_steps-2.toml"
grep -q '^teacher_centering = "ema"$' "$config" || fail "ema not quoted: $(cat "$config")"
grep -q '^include = "\.\./base.toml"$' "$config" || fail "the variant does not include BASE: $(cat "$config")"
[[ $(grep -c ' = ' "$config") == 5 ]] || fail "the variant holds more than its own keys: $(cat "$config")"
"$saccade" config show "$config" | grep '^knn_bank_images = 64 ' >/dev/null || fail "BASE's keys are not in the variant"
echo "ssl_ablations_test: ok"
