#!/usr/bin/env bash
# On the GPU machine, inside a bundle made by scripts/gpu/bundle.sh: the GPU checks,
# each writing JSON into $OUT (default ./gpu-out):
#   1. kernels_cuda_tests (CUDA extraction bit-identical to the CPU backend; the fused
#      augmentation and residual add + LayerNorm against their CPU loops);
#      pretrain_cuda_tests (CUDA graphs, staging, cutting and the fused LayerNorm train the same);
#      a binary that failed runs the tests it did not pass again, one process each;
#   2. saccade bench extract: the CUDA rows (table build at 4096^2, 100k patches) and
#      the CPU rows on this machine's cores; extract_cpu: the CPU table against the pyramid
#      on this host, 1 thread, 256^2..8192^2, fresh and warm gazes (the target "not slower
#      than the pyramid" on a second CPU: on the 2-core dev host the pyramid wins at 8192^2
#      fresh; sizes: SACCADE_GPU_EXTRACT_SIZES);
#   3. saccade bench model: ViT-S in bf16 on the GPU, images/s and MFU; step: saccade bench
#      step of the paper's ViT-S config (the bundle's vit-s-imagenet.toml; SACCADE_GPU_STEP_CONFIG)
#      at batch SACCADE_GPU_STEP_BATCH (default 128), one row per lever variant
#      (SACCADE_GPU_STEP_VARIANTS) and the step's matrix products alone (--products: their
#      TFLOP/s, and the MFU the step cannot pass while they run so), then the fast path (bf16 weights, LayerScale folded,
#      batched glimpses, CUDA graphs, prefetching, the fused residual add + LayerNorm: the
#      config's levers), without and with the bias gradients inside the weight gradients'
#      products (profiled at the last batch) at SACCADE_GPU_STEP_LARGE_BATCH
#      (default 512,384,256: a larger batch amortises the per-kernel dispatch; each row says its
#      peak device memory, or that it ran out of it; step_large), and the fast path alone at
#      SACCADE_GPU_STEP_SMALL_BATCH (default 16,32,64: its floor; step_small); step_losses fails when a
#      variant's losses leave those of the first variant that ran by more than SACCADE_GPU_STEP_TOLERANCE
#      (relative, default 0.02) on the same batches from the same weights; a step bench that
#      lost the device (exit 75), ran a variant past its timeout (SACCADE_GPU_STEP_VARIANT_TIMEOUT,
#      default 90 s; _LARGE_: 120 s) or died of a fault goes on in a new process (--resume);
#   torch_step (after the feed): the same step in plain PyTorch (scripts/gpu/torch_step.py, the model checked
#      against the step check's description of saccade's), eager and under torch.compile
#      (SACCADE_GPU_TORCH_VARIANTS, default eager,blocks) in bf16 at SACCADE_GPU_TORCH_BATCH
#      (default 256): saccade's fastest step that trained the same against PyTorch's;
#   data: saccade bench data of the paper's views on this host's JPEG decoder (TurboJPEG),
#      one core: images/s of each cut side against decoding alone, bytes per image;
#   feed, feed_data: saccade bench runtime --feed on the GPU: `saccade run` with one learner
#      on cuda:0 and 1, 2, 4, 8, 14 data actors of one core each (SACCADE_GPU_FEED_ACTORS;
#      feed_data: 1, 2, 4) on 2,000 generated 500 x 375 JPEGs in tar shards, views cut on
#      the learner (feed) or by the data actors (feed_data), batch SACCADE_GPU_FEED_BATCH
#      (default 128), the learner's levers those of the fastest `step` variant of the same call
#      that trained the same (or config keys in SACCADE_GPU_FEED_KEYS="ssl.precision=bf16-params
#      ssl.cuda_graphs=true ..."; "" for the config's own), against the same trainer fed from
#      memory (saccade bench step), each run killed after SACCADE_GPU_FEED_RUN_TIMEOUT s (90):
#      images/s, share of the memory-fed rate, data wait, wire MB/s, host cores; each
#      run's log (every process of its job) in feed-logs/ (feed_data-logs/);
#   4. saccade bench allreduce over NCCL, one rank per GPU (2 ranks need 2 GPUs: NCCL
#      refuses two ranks on one device), and over Gloo with 2 ranks;
#   5. with SACCADE_GPU_TRAIN="CONFIG ...": `saccade pretrain CONFIG` on the GPU for each,
#      all at once (Fashion-MNIST from the bundle's data/), each in $OUT/train-NAME/;
#      a run the budget stops is exported from its last checkpoint (backbone.safetensors;
#      its exit code is export-NAME),
#      and with SACCADE_GPU_EXPORT_STEPS="N ..." checkpoint N of each run too
#      (backbone-stepN.safetensors; a missing checkpoint is a failed export-NAME-stepN);
# then summary.json with every step's exit code and every figure, and report.md (printed last):
# the verdicts (tests passed, the best step MFU against 30%, the best feed against 90% of the
# memory-fed rate) and the tables for the docs (scripts/gpu/results.py). Exits 3 at once
# without a GPU.
# SACCADE_GPU_CHECKS picks among steps 1-4 (default: all; "none": training only).
# Every step runs under `timeout`, within SACCADE_GPU_BUDGET_S seconds (default 480) from
# the start: a hung step costs its share of the device lease, not all of it.
set -uo pipefail
start=$(date +%s)
budget=${SACCADE_GPU_BUDGET_S:-480}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config_variant.sh"  # copied beside run.sh by bundle.sh
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
known="kernels_cuda_tests pretrain_cuda_tests extract extract_cpu model step torch_step data feed feed_data allreduce_nccl allreduce_gloo"
checks=${SACCADE_GPU_CHECKS:-$known}
for c in $checks; do
  if [ "$c" != none ] && [[ " $known " != *" $c "* ]]; then
    echo "run.sh: SACCADE_GPU_CHECKS: unknown check '$c' (expected none or some of: $known)" >&2
    exit 2
  fi
done
if [ "$checks" = none ] && [ -z "${SACCADE_GPU_TRAIN:-}" ]; then
  echo "run.sh: nothing to run (SACCADE_GPU_CHECKS=none and no SACCADE_GPU_TRAIN)" >&2
  exit 2
fi
read -r -a train <<<"${SACCADE_GPU_TRAIN:-}"
for config in "${train[@]}"; do
  [ -f "$config" ] || { echo "run.sh: SACCADE_GPU_TRAIN: no config file '$config'" >&2; exit 2; }
done
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
mkdir -p "$out/rc"
step() {  # step NAME CAP COMMAND...: runs it for at most CAP s (and within the budget),
  local name=$1 cap=$2  # logs to $out/NAME.log, its exit code to $out/rc/NAME (124: timed out;
  # SIGTERM first, and 30 s to drain: a stopped pretraining run commits a checkpoint)
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -le 0 ]; then
    echo "== $name: skipped, the ${budget} s budget is spent" | tee "$out/$name.log"
    echo 124 >"$out/rc/$name"
    return
  fi
  echo "== $name ($cap s at most): $*"
  timeout --kill-after=30 "$cap" "$@" 2>&1 | tee "$out/$name.log"
  echo "${PIPESTATUS[0]}" >"$out/rc/$name"
}
wants() { [[ " $checks " == *" $1 "* ]]; }
resumable() {  # resumable NAME CAP COMMAND...: step NAME, a `saccade bench step`; when it
  # lost the device (exit 75: a fault left its CUDA context unusable) or a fault killed it
  # (SIGABRT, SIGBUS, SIGFPE, SIGSEGV), a new process measures the variants left (--resume:
  # the rows so far stay in its JSON, the one it ended in a failed row), within what is left
  # of CAP: NAME-resumed-1, -2, ... One broken lever must not cost the others' rows.
  local name=$1 cap=$2 begun attempt=0 run=$1 left extra=()
  shift 2
  begun=$(date +%s)
  while :; do
    step "$run" "$((cap - ($(date +%s) - begun)))" "$@" "${extra[@]}"
    case $(cat "$out/rc/$run") in 75 | 134 | 135 | 136 | 139) ;; *) return ;; esac
    attempt=$((attempt + 1))
    left=$((cap - ($(date +%s) - begun)))
    if [ "$attempt" -gt 8 ] || [ "$left" -le 0 ]; then
      echo "== $name: not resumed again after $attempt runs ($left s of its $cap s left)"
      return
    fi
    run=$name-resumed-$attempt extra=(--resume)
  done
}
gtests() {  # gtests NAME CAP: a GPU test binary; when it fails, every test it did not pass
  # runs again alone, one process each (NAME-alone/TEST.json): a fault in one test loses the
  # CUDA context, or the process, for every test after it, which then says nothing of theirs.
  local name=$1 cap=$2 begun again
  begun=$(date +%s)
  step "$name" "$cap" "$bundle/bin/$name" --gtest_output="json:$out/$name.json"
  [ "$(cat "$out/rc/$name")" -eq 0 ] && return
  "$bundle/bin/$name" --gtest_list_tests >"$out/$name-list.txt" 2>&1
  again=$("$py" "$here/results.py" unpassed "$out/$name-list.txt" "$out/$name.json") || return
  [ -n "$again" ] || return
  mkdir -p "$out/$name-alone"
  step "$name-alone" "$((cap - ($(date +%s) - begun)))" bash -c '
    bin=$1 dir=$2 code=0
    shift 2
    for t in "$@"; do "$bin" --gtest_filter="$t" --gtest_output="json:$dir/$t.json" || code=1; done
    exit $code' - "$bundle/bin/$name" "$out/$name-alone" $again
}
wants kernels_cuda_tests && gtests kernels_cuda_tests 150
wants pretrain_cuda_tests && gtests pretrain_cuda_tests 90
wants extract && step extract 120 "$bundle/bin/saccade" bench extract --no-photos \
  --sizes 256,4096 --threads 1,0 --no-baseline --accuracy-patches 0 \
  --cuda-sizes 1024,4096,8192 --json "$out/extract.json"
if wants extract_cpu; then
  for gazes in fresh warm; do
    flag=(); [ $gazes = fresh ] && flag=(--fresh-gazes)
    step "extract_cpu_$gazes" 60 "$bundle/bin/saccade" bench extract --no-photos --threads 1 \
      "${flag[@]}" --no-baseline --accuracy-patches 0 \
      --sizes "${SACCADE_GPU_EXTRACT_SIZES:-256,1024,2048,4096,8192}" \
      --json "$out/extract_cpu_$gazes.json"
  done
fi
wants data && step data 60 "$bundle/bin/saccade" bench data "$here/vit-s-imagenet.toml" \
  --generated 200 --no-photos --json "$out/data.json"
wants model && step model 120 "$bundle/bin/saccade" bench model --presets vit_s --device cuda \
  --bf16 --batch "${SACCADE_GPU_MODEL_BATCH:-256}" --iters 20 --json "$out/model.json"
if wants step; then
  step_config=${SACCADE_GPU_STEP_CONFIG:-$here/vit-s-imagenet.toml}
  # The reference for the losses is bf16 autocast; then the config's fast path (every lever
  # up to the fused add + LayerNorm, each measured one by one on an H200: docs/model.md,
  # "Every lever, A/B in one call"; that list again with SACCADE_GPU_STEP_VARIANTS), and the
  # levers still open on it: each epilogue alone (the two together were slower: cuBLASLt ran
  # their epilogue as a kernel of its own), and the views cut on the device.
  full=bf16-params+sdpa+foreach+fold+batched+graphs+prefetch+addnorm
  levers=bf16+sdpa+foreach,$full,$full+bgrad,$full+mlp,$full+cut
  # Warm-up long enough for the caching allocator and cuDNN's plans to settle.
  timing=(--warmup "${SACCADE_GPU_STEP_WARMUP:-5}" --steps "${SACCADE_GPU_STEP_STEPS:-10}")
  # A variant past its timeout (a hang) ends the bench, and the next process goes on.
  resumable step 240 "$bundle/bin/saccade" bench step "$step_config" --device cuda "${timing[@]}" \
    --variant-timeout "${SACCADE_GPU_STEP_VARIANT_TIMEOUT:-90}" \
    --batch "${SACCADE_GPU_STEP_BATCH:-128}" \
    --variants "${SACCADE_GPU_STEP_VARIANTS:-$levers}" --products \
    --json "$out/step.json"
  # Largest batch first: the profile is of the last, one that fits (on an H200 the fast path
  # holds 0.24 GiB per image, so 512 is at the edge of its memory: docs/model.md).
  # Fewer steps: at these batches a step is long and steady (step_small times the same way).
  batch_timing=(--variant-timeout "${SACCADE_GPU_STEP_LARGE_VARIANT_TIMEOUT:-120}"
    --warmup "${SACCADE_GPU_STEP_LARGE_WARMUP:-3}" --steps "${SACCADE_GPU_STEP_LARGE_STEPS:-6}")
  resumable step_large 200 "$bundle/bin/saccade" bench step "$step_config" --device cuda \
    "${batch_timing[@]}" --batch "${SACCADE_GPU_STEP_LARGE_BATCH:-512,384,256}" \
    --variants "$full,$full+bgrad" --products \
    --json "$out/step_large.json" \
    --profile "${TMPDIR:-/tmp}/step-trace.json"
  # Where the profiled step's time went on the device: busy share, kernels by kind, the top
  # kernels, and the top ops that launched them with their input shapes (what tells a bias
  # add from a residual add; the trace itself is too large to bring back).
  step step_profile 60 "$py" "$here/results.py" profile "${TMPDIR:-/tmp}/step-trace.json" \
    "$out/step_profile.json"
  # The fast path at small batches: the floor a step does not go under however few images a
  # GPU gets, the wall of many GPUs at a fixed global batch (docs/scaling.md).
  resumable step_small 90 "$bundle/bin/saccade" bench step "$step_config" --device cuda \
    "${batch_timing[@]}" --batch "${SACCADE_GPU_STEP_SMALL_BATCH:-16,32,64}" --variants "$full" \
    --json "$out/step_small.json"
  # The fast path trains the same: every variant within the tolerance of the losses of its
  # call's first variant that ran at its batch (on the same batches from the same weights).
  step step_losses 10 "$py" "$here/results.py" losses "$out/step.json" \
    "${SACCADE_GPU_STEP_TOLERANCE:-0.02}"
fi
# One learner on cuda:0 fed by 1..14 data actors (one core each) over the real runtime, on
# generated ImageNet-size JPEGs in tar shards, against the same trainer fed from memory;
# feed: views cut on the learner, feed_data: cut by the data actors.
# The learner's levers: SACCADE_GPU_FEED_KEYS as given ("" = the config's own), or unset
# ("auto") the config keys of the fastest variant of this call's step check at the feed's
# batch that trained the same (step.json; views.* left out: each feed check sets its side).
fastest_step_keys() {  # the config keys of the fastest step variant (stdout), or none
  "$py" "$here/results.py" fastest-keys "$out/step.json" "${SACCADE_GPU_STEP_TOLERANCE:-0.02}" \
    "${SACCADE_GPU_FEED_BATCH:-128}"
}
feed_keys=()
if wants feed || wants feed_data; then
  keys=${SACCADE_GPU_FEED_KEYS-auto}
  [ "$keys" = auto ] && keys=$(fastest_step_keys)
  read -r -a feed_keys <<<"$keys"
  echo "== feed: the learner's levers: ${feed_keys[*]:-those of the config}"
fi
for side in learner data; do
  name=feed; [ $side = data ] && name=feed_data
  wants $name || continue
  actors=${SACCADE_GPU_FEED_ACTORS:-1,2,4,8,14}; [ $side = data ] && actors=${SACCADE_GPU_FEED_DATA_ACTORS:-1,2,4}
  if ! SACCADE="$bundle/bin/saccade" config_variant "$here/vit-s-imagenet.toml" "$out/$name.toml" \
    views.cut_on=$side ssl.batch_size="${SACCADE_GPU_FEED_BATCH:-128}" "${feed_keys[@]}" \
    >/dev/null 2>"$out/$name.log"; then
    # A refused key is a failed check (named in summary.json), not a silently skipped one.
    echo "== $name: its config was refused (SACCADE_GPU_FEED_KEYS?):"
    cat "$out/$name.log"
    echo 2 >"$out/rc/$name"
    continue
  fi
  step $name 300 "$bundle/bin/saccade" bench runtime "$out/$name.toml" --no-throughput \
    --no-recovery --no-data-path --device cuda --feed "$actors" \
    --feed-images "${SACCADE_GPU_FEED_IMAGES:-2000}" --steps "${SACCADE_GPU_FEED_STEPS:-30}" \
    --run-timeout "${SACCADE_GPU_FEED_RUN_TIMEOUT:-90}" \
    --work-root "${TMPDIR:-/tmp}/saccade-$name" --json "$out/$name.json"
  # Each run's log (every process of its job; the last MB of each), which the JSON cannot
  # hold: the work root stays on this machine, and its checkpoints are too large to take.
  mkdir -p "$out/$name-logs"
  for log in "${TMPDIR:-/tmp}/saccade-$name"/*.log; do
    [ -f "$log" ] && tail -c 1000000 "$log" >"$out/$name-logs/$(basename "$log")"
  done
done
# After the feed: in a call whose budget is short, the PyTorch comparison (its compiling
# takes minutes) is the check that gets what is left, its rows written as each finishes.
if wants torch_step; then
  # Saccade's model as the step checks of this call described it, else a one-step bench of
  # the config just for its description.
  described=$out/step_large.json
  [ -f "$described" ] || described=$out/step.json
  if [ ! -f "$described" ]; then
    described=$out/torch_step_model.json
    step torch_step_model 60 "$bundle/bin/saccade" bench step \
      "${SACCADE_GPU_STEP_CONFIG:-$here/vit-s-imagenet.toml}" --device cuda --batch 2 \
      --warmup 0 --steps 1 --phase-steps 0 --variants bf16 --json "$described"
  fi
  step torch_step 240 "$py" "$here/torch_step.py" "$described" --device cuda \
    --batch "${SACCADE_GPU_TORCH_BATCH:-256}" --variants "${SACCADE_GPU_TORCH_VARIANTS:-eager,blocks}" \
    --precision bf16 --warmup "${SACCADE_GPU_STEP_LARGE_WARMUP:-3}" \
    --steps "${SACCADE_GPU_STEP_LARGE_STEPS:-6}" --json "$out/torch_step.json"
fi
wants allreduce_nccl && step allreduce_nccl 60 "$bundle/bin/saccade" bench allreduce \
  --device cuda --world-size "$gpus" --megabytes 1,16,64,256 --iterations 20 \
  --json "$out/allreduce_nccl.json"
wants allreduce_gloo && step allreduce_gloo 60 "$bundle/bin/saccade" bench allreduce \
  --device cpu --world-size 2 --megabytes 1,16,64 --store-port 29612 \
  --json "$out/allreduce_gloo.json"
data=$here/data
for config in "${train[@]}"; do
  # The config as given, on the bundle's copy of Fashion-MNIST, its work_dir under $out,
  # with data loader threads to feed a GPU; the runs share the GPU and the cores.
  name=$(basename "$config" .toml)
  mkdir -p "$out/train-$name"
  SACCADE="$bundle/bin/saccade" config_variant "$config" "$out/train-$name/variant.toml" \
    "job.work_dir=$out/train-$name" "data.loader_threads=${SACCADE_GPU_LOADER_THREADS:-8}" \
    "ssl.checkpoint_every_steps=${SACCADE_GPU_CHECKPOINT_EVERY:-1250}" \
    "data.idx_images=$data/train-images-idx3-ubyte.gz" \
    "data.idx_labels=$data/train-labels-idx1-ubyte.gz" \
    "data.val_idx_images=$data/t10k-images-idx3-ubyte.gz" \
    "data.val_idx_labels=$data/t10k-labels-idx1-ubyte.gz" || exit 2
  # Resolved, so that the run's folder holds the whole config it ran.
  "$bundle/bin/saccade" config show "$out/train-$name/variant.toml" >"$out/train-$name/config.toml"
  # No cap of its own: the budget stops it (and it checkpoints on the way out).
  step "pretrain-$name" "$budget" "$bundle/bin/saccade" pretrain "$out/train-$name/config.toml" \
    --fresh >/dev/null &
done
wait
for config in "${train[@]}"; do
  # A run the budget stopped committed a checkpoint but wrote no backbone: export that
  # checkpoint's teacher, so the run comes back probe-ready without its checkpoints.db.
  name=$(basename "$config" .toml)
  if [ ! -f "$out/train-$name/backbone.safetensors" ] && [ -d "$out/train-$name/checkpoints.db" ]; then
    "$bundle/bin/saccade" export "$out/train-$name/config.toml" >>"$out/pretrain-$name.log" 2>&1
    code=$?
    echo "$code" >"$out/rc/export-$name"  # in summary.json; a failure fails the call
    [ "$code" -eq 0 ] ||
      echo "run.sh: could not export the last checkpoint of $name (pretrain-$name.log)" >&2
  fi
  # SACCADE_GPU_EXPORT_STEPS="4000 ...": those checkpoints' teachers too (backbone-stepN), so
  # a run compares with another at the same step and its checkpoints.db can stay behind.
  for s in ${SACCADE_GPU_EXPORT_STEPS:-}; do
    "$bundle/bin/saccade" export "$out/train-$name/config.toml" --step "$s" \
      --out "$out/train-$name/backbone-step$s.safetensors" >>"$out/pretrain-$name.log" 2>&1
    echo $? >"$out/rc/export-$name-step$s"
  done
done
shopt -s nullglob
codes="" status=0
for f in "$out"/rc/*; do
  codes+="\"$(basename "$f")\": $(cat "$f"), "
  [ "$(cat "$f")" -eq 0 ] || status=1
done
"$py" "$here/results.py" summary "$out" "{${codes%, }}"
# The verdicts and tables, printed last: a transport that keeps only the output's tail
# still brings them back.
"$py" "$here/results.py" report "$out" >/dev/null || echo "run.sh: no report.md" >&2
if [ -n "${SACCADE_GPU_PACK:-}" ]; then
  # For a transport that takes back few files (the device tool: 8): everything but
  # summary.json and report.md in 15 MiB pieces of one tar.gz (cat gpu-out.tgz.* | tar xz).
  # SACCADE_GPU_PACK_EXCLUDE: tar patterns left behind, e.g. "train-a/checkpoints.db" (the
  # run's backbone.safetensors is probed with `saccade probe --backbone`).
  excludes=(--exclude=summary.json --exclude=report.md)
  for pattern in ${SACCADE_GPU_PACK_EXCLUDE:-}; do excludes+=("--exclude=./$pattern"); done
  tar -C "$out" "${excludes[@]}" -czf "${TMPDIR:-/tmp}/gpu-out.tgz" .
  split -b 15M -d "${TMPDIR:-/tmp}/gpu-out.tgz" "$out/gpu-out.tgz."
  find "$out" -mindepth 1 -maxdepth 1 ! -name summary.json ! -name report.md \
    ! -name 'gpu-out.tgz.*' -exec rm -rf {} +
  ls -la "$out"
fi
[ -f "$out/report.md" ] && cat "$out/report.md"
exit $status
