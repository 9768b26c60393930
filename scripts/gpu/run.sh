#!/usr/bin/env bash
# On the GPU machine, inside a bundle made by scripts/gpu/bundle.sh: the GPU checks,
# each writing JSON into $OUT (default ./gpu-out):
#   1. kernels_cuda_tests (CUDA extraction bit-identical to the CPU backend);
#   2. saccade bench extract: the CUDA rows (table build at 4096^2, 100k patches) and
#      the CPU rows on this machine's cores;
#   3. saccade bench model: ViT-S in bf16 on the GPU, images/s and MFU;
#   4. saccade bench allreduce over NCCL, one rank per GPU (2 ranks need 2 GPUs: NCCL
#      refuses two ranks on one device), and over Gloo with 2 ranks;
# then summary.json with every step's exit code. Exits 3 at once without a GPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
if [ ! -f "$here/payload.tar.xz" ]; then
  echo "run.sh: no payload.tar.xz beside it; make the bundle with scripts/gpu/bundle.sh" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >"$out/gpus.txt" 2>&1; then
  echo "run.sh: no NVIDIA GPU here (nvidia-smi -L failed); run it on the GPU machine" >&2
  exit 3
fi
py=${PYTHON:-python3}
libs=$("$py" - <<'PY'
import glob, os, torch
dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
for p in __import__("sys").path:
    dirs += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))
    dirs += sorted(glob.glob(os.path.join(p, "nvidia", "cu13", "lib")))
print(":".join(d for d in dict.fromkeys(dirs) if os.path.isdir(d)))
PY
) || { echo "run.sh: $py cannot import torch (set PYTHON)" >&2; exit 3; }
# Unpacked with python (always there with PyTorch; an xz binary may not be).
bundle=${TMPDIR:-/tmp}/saccade-gpu-bundle
rm -rf "$bundle"
"$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
  "$here/payload.tar.xz" "$bundle" || exit 2
export LD_LIBRARY_PATH="$bundle/lib:$libs:${LD_LIBRARY_PATH:-}"
gpus=$(grep -c "^GPU " "$out/gpus.txt")
declare -A rc
step() {  # step NAME COMMAND...: runs it, logs to $out/NAME.log, records its exit code
  local name=$1
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  rc[$name]=${PIPESTATUS[0]}
}
step kernels_cuda_tests "$bundle/bin/kernels_cuda_tests" --gtest_output="json:$out/kernels_cuda_tests.json"
step extract "$bundle/bin/saccade" bench extract --no-photos --sizes 256,4096 --threads 1,0 \
  --no-baseline --accuracy-patches 0 --cuda-sizes 1024,4096,8192 --json "$out/extract.json"
step model "$bundle/bin/saccade" bench model --presets vit_s --device cuda --bf16 --batch 256 \
  --iters 20 --json "$out/model.json"
step allreduce_nccl "$bundle/bin/saccade" bench allreduce --device cuda --world-size "$gpus" \
  --megabytes 1,16,64,256 --iterations 20 --json "$out/allreduce_nccl.json"
step allreduce_gloo "$bundle/bin/saccade" bench allreduce --device cpu --world-size 2 \
  --megabytes 1,16,64 --store-port 29612 --json "$out/allreduce_gloo.json"
codes=""
for k in "${!rc[@]}"; do codes+="\"$k\": ${rc[$k]}, "; done
"$py" - "$out" "{${codes%, }}" <<'PY'
import json, os, sys
out, codes = sys.argv[1], json.loads(sys.argv[2])
summary = {"exit_codes": codes, "gpus": open(os.path.join(out, "gpus.txt")).read().splitlines()}
# Dense bf16 peak per GPU (vendor figures, TFLOP/s) for MFU.
peaks = {"H100": 989.4, "H200": 989.4, "A100": 312.0}
model = os.path.join(out, "model.json")
if os.path.exists(model):
    rows = json.load(open(model))
    rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
    name = summary["gpus"][0] if summary["gpus"] else ""
    peak = next((v for k, v in peaks.items() if k in name), None)
    for r in rows:
        if isinstance(r, dict) and r.get("gflops_per_s"):
            r["images_per_s"] = r.get("batch", 0) / (r["fwd_bwd_ms"] / 1e3) if r.get("fwd_bwd_ms") else None
            r["mfu"] = r["gflops_per_s"] / 1e3 / peak if peak else None
    summary["model"] = rows
for name in ("extract", "allreduce_nccl", "allreduce_gloo"):
    path = os.path.join(out, name + ".json")
    if os.path.exists(path):
        summary[name] = json.load(open(path))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
print("run.sh: exit codes", codes, "->", os.path.join(out, "summary.json"))
PY
for k in "${!rc[@]}"; do [ "${rc[$k]}" -eq 0 ] || exit 1; done
