#!/usr/bin/env bash
# scripts/gpu/torch_step.py, the step in plain PyTorch, on this machine's CPU with Debian's
# PyTorch: it builds saccade's model from `saccade bench step --json` (every parameter's
# name and shape; refused when they differ), trains a few steps of it and writes rows whose
# figures use saccade's FLOPs per image; its first loss is the scale of saccade's on the
# same config (both start near ln K); a file that is not a step JSON is refused by name.
set -euo pipefail
saccade="$1" script="$2" config="$3"
py=${PYTHON:-/usr/bin/python3}
"$py" -c "import torch" 2>/dev/null || {
  echo "torch_step_test: $py cannot import torch (scripts/install-deps.sh installs python3-torch)" >&2
  exit 1
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "torch_step_test: $*" >&2
  exit 1
}
"$saccade" bench step "$config" --batch 4 --warmup 0 --steps 1 --phase-steps 0 \
  --json "$dir/step.json" >"$dir/bench.txt" ||
  { cat "$dir/bench.txt" >&2; fail "saccade bench step failed"; }
"$py" "$script" "$dir/step.json" --batch 4 --warmup 1 --steps 2 --threads 1 \
  --json "$dir/torch.json" >"$dir/torch.txt" 2>&1 ||
  { cat "$dir/torch.txt" >&2; fail "torch_step.py failed"; }
"$py" - "$dir/step.json" "$dir/torch.json" <<'PY' || fail "rows: $(cat "$dir/torch.json")"
import json, math, sys
step, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
expected = sum(math.prod(shape) for _, shape in step["step"]["parameters"])
assert ref["parameters"] == expected > 0, (ref["parameters"], expected)
assert ref["flop_per_image"] == step["flop_per_image"] > 0, ref
(row,) = ref["rows"]
assert row["failure"] is None and row["variant"] == "torch eager bf16" and row["batch"] == 4, row
assert row["images_per_second"] > 0 and len(row["losses"]) == 3, row
assert abs(row["tflops"] - ref["flop_per_image"] * row["images_per_second"] / 1e12) < 1e-9, row
assert row["mfu"] is None, row  # no peak for a CPU
ln_k = math.log(step["step"]["head"]["n_prototypes"])
first_saccade, first_torch = step["rows"][0]["losses"][0], row["losses"][0]
assert ln_k < first_torch, (first_torch, ln_k)
assert abs(first_torch - first_saccade) < 0.05 * first_saccade, (first_torch, first_saccade)
assert all(math.isfinite(l) for l in row["losses"]), row
PY
# Not saccade's model: a parameter dropped, a shape changed; each named.
"$py" - "$dir/step.json" "$dir" <<'PY'
import json, sys
step = json.load(open(sys.argv[1]))
dropped = json.loads(json.dumps(step))
dropped["step"]["parameters"] = [
    p for p in dropped["step"]["parameters"] if p[0] != "backbone.blocks.0.attn.qkv.bias"]
json.dump(dropped, open(sys.argv[2] + "/dropped.json", "w"))
wider = json.loads(json.dumps(step))
wider["step"]["backbone"]["mlp_hidden"] += 8
json.dump(wider, open(sys.argv[2] + "/wider.json", "w"))
PY
for case in dropped:backbone.blocks.0.attn.qkv.bias wider:backbone.blocks.0.mlp.fc1.weight; do
  name=${case%%:*} named=${case#*:}
  if "$py" "$script" "$dir/$name.json" --batch 2 --steps 1 >"$dir/$name.txt" 2>&1; then
    fail "a step JSON with a model that is not saccade's ($name) ran"
  fi
  grep -q "not saccade's model.*$named" "$dir/$name.txt" ||
    { cat "$dir/$name.txt" >&2; fail "$name: $named not named"; }
done
echo '{"rows": []}' >"$dir/rows-only.json"
if "$py" "$script" "$dir/rows-only.json" --batch 2 >"$dir/rows-only.txt" 2>&1; then
  fail "a JSON without a step ran"
fi
grep -q "rows-only.json: not the JSON of \`saccade bench step --json\`" "$dir/rows-only.txt" ||
  { cat "$dir/rows-only.txt" >&2; fail "the refused file was not named"; }
echo "torch_step_test: ok"
