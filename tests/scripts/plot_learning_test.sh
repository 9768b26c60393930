#!/usr/bin/env bash
# scripts/plot_learning.py on a made-up run: both PNGs are written and are
# PNGs; a run with nothing to plot fails with a message naming the folder.
set -euo pipefail
script="$1"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/metrics.jsonl" <<'JSON'
{"time": 1, "stage": "pretrain", "step": 0, "knn": 0.62, "knn_glimpse_1": 0.3, "knn_glimpse_2": 0.35}
{"time": 2, "stage": "pretrain", "step": 0, "loss": 7.1, "target_entropy_ratio": 0.9}
{"time": 3, "stage": "pretrain", "step": 249, "loss": 6.9, "target_entropy_ratio": 0.95, "knn": 0.7, "knn_glimpse_1": 0.4, "knn_glimpse_2": 0.45}
JSON
cat > "$dir/probe.json" <<'JSON'
{"checkpoint_step": 250, "train_images": 100, "val_images": 50, "rows": [
 {"name": "pretrained", "vit_knn": 0.7, "vit_linear": 0.72, "vit_c": 1, "task_c": 1, "step_knn": [0.4, 0.5], "step_linear": [0.41, 0.52]},
 {"name": "supervised", "vit_knn": 0.75, "vit_linear": 0.78, "vit_c": 1, "task_c": 1, "step_knn": [0.45, 0.55], "step_linear": [0.46, 0.57]},
 {"name": "pixels", "vit_knn": 0.8, "vit_linear": 0.85, "vit_c": 1, "task_c": 0, "step_knn": [], "step_linear": []}],
 "supervised": {"dir": "x/supervised", "steps": 250, "seconds": 120.4, "images_per_second": 133.0}}
JSON
cat > "$dir/policy.json" <<'JSON'
{"checkpoint_step": 250, "task_head": "transformer", "train_images": 100, "val_images": 50,
 "sees_state": true, "reward": "probability", "random_accuracy": [0.3, 0.35],
 "policy_accuracy": [0.36, 0.41], "fixed_path_accuracy": [0.34, 0.38],
 "val_curve": [{"batches": 2, "reward": 0.2, "accuracy": [0.3, 0.33], "gaze_spread": [0, 0.1]},
               {"batches": 4, "reward": 0.25, "accuracy": [0.35, 0.4], "gaze_spread": [0, 0.2]}]}
JSON
"$PY" "$script" "$dir" "$dir/out" > "$dir/out.txt"
grep -q "fixed path    34.0   38.0" "$dir/out.txt" || {
  cat "$dir/out.txt" >&2
  echo "the policy table lacks the learned fixed path" >&2
  exit 1
}
for png in learning_knn.png probe_glimpses.png policy_training.png; do
  [ "$(head -c 4 "$dir/out/$png" | od -An -c | tr -d ' ')" = "211PNG" ] || {
    echo "$png is not a PNG" >&2
    exit 1
  }
done
grep -q "probe of checkpoint 250:" "$dir/out.txt" || { cat "$dir/out.txt" >&2; exit 1; }
# The supervised baseline's row and its budget (probe.baselines "supervised").
grep -q "^supervised  *75.0   78.0   45.0   46.0" "$dir/out.txt" &&
  grep -q "supervised: same backbone and views with labels, 250 steps, trained in 120 s at 133.0 images/s" \
    "$dir/out.txt" || { cat "$dir/out.txt" >&2; echo "the supervised baseline is missing" >&2; exit 1; }
# A probe of a backbone file (`saccade probe --backbone`) names the file, not checkpoint -1.
mkdir "$dir/file"
sed 's|"checkpoint_step": 250,|"checkpoint_step": -1, "backbone_file": "runs/x/backbone.safetensors",|' \
  "$dir/probe.json" > "$dir/file/probe.json"
# ...and so does GRPO against it (saccade policy on a probe of a file).
sed 's|"checkpoint_step": 250,|"checkpoint_step": -1, "backbone_file": "runs/x/backbone.safetensors",|' \
  "$dir/policy.json" > "$dir/file/policy.json"
"$PY" "$script" "$dir/file" "$dir/file/out" > "$dir/file.txt"
grep -q "probe of backbone runs/x/backbone.safetensors:" "$dir/file.txt" &&
  grep -q "gaze policy on backbone runs/x/backbone.safetensors:" "$dir/file.txt" || {
  cat "$dir/file.txt" >&2
  echo "a backbone file's probe or policy does not name the file" >&2
  exit 1
}
mkdir "$dir/empty"
if "$PY" "$script" "$dir/empty" 2> "$dir/err"; then
  echo "an empty run was plotted" >&2
  exit 1
fi
grep -q "nothing to plot" "$dir/err" || { cat "$dir/err" >&2; exit 1; }
echo "plot_learning: ok"
