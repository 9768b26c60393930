#!/usr/bin/env bash
# scripts/gpu/run.sh (the GPU machine's half of scripts/gpu/bundle.sh) on this machine,
# with nvidia-smi and python's torch replaced and a payload of this build's saccade:
# the training step runs every config at once on the bundle's data, each in its own
# folder; the extract_cpu check writes fresh- and warm-gaze rows; the step budget stops a long run (exit 124, which still checkpoints, and its
# checkpoint is exported as its backbone); a fault in a step variant or a GPU test costs only
# itself; the step check parses its variants, the feed check
# takes the fastest step variant's keys and refuses a bad key, without a GPU; packing
# leaves only summary.json and tar.gz pieces, without what PACK_EXCLUDE names; an
# unknown check, a missing config, nothing to run and no GPU are refused before anything runs.
set -euo pipefail
saccade="$1" script="$2"
fashion=/usr/share/datasets/fashion-mnist
[[ -f $fashion/train-images-idx3-ubyte.gz ]] || { echo "gpu_run_test: no $fashion, skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/tiny_job_lib.sh"
fail() {
  echo "gpu_run_test: $*" >&2
  exit 1
}
# The bundle: run.sh, a payload (python's tarfile reads a plain tar too), the data.
mkdir -p "$dir/bundle" "$dir/stage/bin" "$dir/fake/bin" "$dir/fake/py/torch"
cp "$script" "$dir/bundle/run.sh"
cp "$(dirname "$script")/../config_variant.sh" "$(dirname "$script")/results.py" \
  "$(dirname "$script")/torch_step.py" "$dir/bundle/"
# saccade itself, but with FAKE_STEP=LOG a `bench step` that logs its arguments to LOG and, by
# call, loses the device (exit 75), dies of a segmentation fault, then succeeds.
cat >"$dir/stage/bin/saccade" <<SH
#!/usr/bin/env bash
if [ -n "\${FAKE_STEP:-}" ] && [ "\$1 \$2" = "bench step" ]; then
  echo "\$*" >>"\$FAKE_STEP"
  case \$(wc -l <"\$FAKE_STEP") in 1) exit 75 ;; 2) kill -SEGV \$\$ ;; *) exit 0 ;; esac
fi
exec "$saccade" "\$@"
SH
ln -s "$(dirname "$saccade")/libsaccade_torch.so" "$dir/stage/bin/libsaccade_torch.so"
# GPU test binaries as GoogleTest's command line sees them. kernels_cuda_tests: Suite.B
# fails and breaks the process, so Suite.C fails after it but passes alone;
# pretrain_cuda_tests dies (no JSON), and alone Train.T1 passes and Train.T2 dies.
cat >"$dir/stage/bin/fake_gtest" <<'SH'
#!/usr/bin/env bash
out="" only=""
for a; do
  case $a in
    --gtest_list_tests) [ "$(basename "$0")" = kernels_cuda_tests ] &&
      printf 'Suite.\n  A\n  B\n  C  # GetParam() = 1\n' || printf 'Train.\n  T1\n  T2\n'
      exit 0 ;;
    --gtest_output=json:*) out=${a#--gtest_output=json:} ;;
    --gtest_filter=*) only=${a#--gtest_filter=} ;;
  esac
done
case "$(basename "$0") $only" in
  "kernels_cuda_tests ") results="Suite.A=1 Suite.B=0 Suite.C=0" ;;
  "kernels_cuda_tests Suite.B") results="Suite.B=0" ;;
  "pretrain_cuda_tests Train.T1" | "kernels_cuda_tests "*) results="$only=1" ;;
  *) kill -SEGV $$ ;;
esac
python3 - "$out" $results <<'PY'
import json, sys
tests = [dict(name=t.split("=")[0].split(".")[1], classname=t.split(".")[0], result="COMPLETED",
              **({} if t.endswith("=1") else {"failures": [{"failure": "x"}]})) for t in sys.argv[2:]]
json.dump({"testsuites": [{"name": tests[0]["classname"], "testsuite": tests}]}, open(sys.argv[1], "w"))
sys.exit(0 if all(t.endswith("=1") for t in sys.argv[2:]) else 1)
PY
SH
chmod +x "$dir/stage/bin/saccade" "$dir/stage/bin/fake_gtest"
ln -s fake_gtest "$dir/stage/bin/kernels_cuda_tests"
ln -s fake_gtest "$dir/stage/bin/pretrain_cuda_tests"
tar -C "$dir/stage" -chf "$dir/bundle/payload.tar.xz" bin
ln -s "$fashion" "$dir/bundle/data"
printf '#!/bin/sh\necho "GPU 0: Fake GPU (UUID: GPU-0)"\n' >"$dir/fake/bin/nvidia-smi"
chmod +x "$dir/fake/bin/nvidia-smi"
touch "$dir/fake/py/torch/__init__.py"
config() {  # config NAME STEPS: a tiny Fashion-MNIST job (its data keys left to run.sh)
  {
    printf '[job]\nname = "%s"\nwork_dir = "runs/%s"\n' "$1" "$1"
    tiny_fmnist_sections
    cat <<TOML
[ssl]
epochs = 1
steps_per_epoch = $2
batch_size = 8
head_prototypes = 32
head_hidden = 32
head_bottleneck = 8
threads = 1
checkpoint_every_steps = 1
knn_every_steps = 1000000
[logging]
progress = false
TOML
  } >"$dir/$1.toml"
}
config a 2
config b 2
config long 1000000
run() {  # run OUT [VAR=VALUE...]: run.sh with the fakes, output in $dir/OUT.txt
  local out=$1
  shift
  env PATH="$dir/fake/bin:$PATH" PYTHONPATH="$dir/fake/py" TMPDIR="$dir" OUT="$dir/$out" "$@" \
    bash "$dir/bundle/run.sh" >"$dir/$out.txt" 2>&1
}

# Two runs at once, packed, one run's checkpoints left behind.
# Checkpoint 1 of each run exported beside its final backbone.
run two SACCADE_GPU_CHECKS=none SACCADE_GPU_TRAIN="$dir/a.toml $dir/b.toml" SACCADE_GPU_PACK=1 \
  SACCADE_GPU_PACK_EXCLUDE="train-b/checkpoints.db" SACCADE_GPU_EXPORT_STEPS=1 SACCADE_GPU_CHECKPOINT_EVERY=1 ||
  { cat "$dir/two.txt" >&2; fail "two training runs failed"; }
[[ $(ls "$dir/two") == $'gpu-out.tgz.00\nreport.md\nsummary.json' ]] || fail "packed output: $(ls "$dir/two")"
# The report is the call's last words (a transport that keeps only the tail keeps it).
tail -n 4 "$dir/two.txt" | grep -q "^- Exit codes: all 0$" && grep -q "^# GPU checks: GPU 0: Fake GPU" "$dir/two.txt" ||
  { cat "$dir/two.txt" >&2; fail "run.sh did not end with its report"; }
python3 - "$dir/two/summary.json" <<'PY' || fail "summary.json: $(cat "$dir/two/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["exit_codes"] == {"pretrain-a": 0, "pretrain-b": 0, "export-a-step1": 0,
                           "export-b-step1": 0}, s["exit_codes"]
assert any("steps 0 -> 2" in l for l in s["pretrain-a"]), s["pretrain-a"]
PY
mkdir "$dir/two-unpacked"
cat "$dir"/two/gpu-out.tgz.* | tar -C "$dir/two-unpacked" -xzf -
[[ -d $dir/two-unpacked/train-a/checkpoints.db ]] || fail "run a's checkpoints were not packed"
[[ ! -e $dir/two-unpacked/train-b/checkpoints.db ]] || fail "run b's checkpoints were packed"
[[ -f $dir/two-unpacked/train-b/backbone.safetensors ]] || fail "run b's backbone is missing"
# The step-1 teacher is not the final (step-2) one: the export read the step asked for.
for r in a b; do
  [[ -s $dir/two-unpacked/train-$r/backbone-step1.safetensors ]] || fail "run $r's step 1 was not exported"
  ! cmp -s "$dir/two-unpacked/train-$r/backbone-step1.safetensors" \
    "$dir/two-unpacked/train-$r/backbone.safetensors" || fail "run $r's step-1 export is its final backbone"
done
grep -q "^idx_images = \"$dir/bundle/data/train-images-idx3-ubyte.gz\"" \
  "$dir/two-unpacked/train-a/config.toml" || fail "the config does not read the bundle's data"
grep -q "^work_dir = \"$dir/two/train-a\"" "$dir/two-unpacked/train-a/config.toml" ||
  fail "the run's work_dir is not under OUT"

# The CPU extraction rows: fresh and warm gazes, each its own JSON in summary.json.
run cpu SACCADE_GPU_CHECKS=extract_cpu SACCADE_GPU_EXTRACT_SIZES=256,512 ||
  { cat "$dir/cpu.txt" >&2; fail "the extract_cpu check failed"; }
python3 - "$dir/cpu/summary.json" <<'PY' || fail "extract_cpu summary: $(cat "$dir/cpu/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["exit_codes"] == {"extract_cpu_fresh": 0, "extract_cpu_warm": 0}, s["exit_codes"]
for name, fresh in (("extract_cpu_fresh", True), ("extract_cpu_warm", False)):
    rows = s[name]["results"]
    assert sorted(r["width"] for r in rows) == [256, 512], rows
    for r in rows:
        assert r["fresh_gazes"] is fresh and r["threads"] == 1, r
        assert r["integral_us_per_patch"] > 0 and r["pyramid_us_per_patch"] > 0, r
PY

# The step and feed checks without a GPU: bench step loads the bundle's ViT-S config and
# parses every lever variant run.sh asks for before it looks for a device, so a misspelt
# variant or a config the binary refuses shows here rather than in a GPU lease; a feed key
# the config refuses fails the feed check by name instead of skipping it.
cp "$(dirname "$script")/../../configs/vit-s-imagenet.toml" "$dir/bundle/"
if run nogpu SACCADE_GPU_CHECKS="step torch_step feed" \
  SACCADE_GPU_FEED_KEYS="ssl.precision=bf16-params ssl.no_such_key=1"; then
  fail "the step and feed checks passed without a GPU"
fi
for name in step step_large step_small; do
  grep -q -- "--device cuda: no CUDA device" "$dir/nogpu/$name.log" ||
    { cat "$dir/nogpu/$name.log" >&2; fail "$name stopped before its device check"; }
done
[[ $(cat "$dir/nogpu/rc/feed") == 2 ]] && grep -q "no_such_key" "$dir/nogpu/feed.log" ||
  { cat "$dir/nogpu.txt" >&2; fail "a refused feed key did not fail the feed check by name"; }
python3 - "$dir/nogpu/summary.json" <<'PY' || fail "summary of the step check: $(cat "$dir/nogpu/summary.json")"
import json, sys
codes = json.load(open(sys.argv[1]))["exit_codes"]
assert codes["feed"] == 2 and codes["step"] != 0 and codes["step_large"] != 0, codes
assert codes["step_small"] != 0, codes
# No step JSON to read saccade's model from: its own one-step bench, which needs a GPU too.
assert codes["torch_step_model"] != 0 and codes["torch_step"] != 0, codes
PY

# The feed check's command line as the bundled binary parses it: it starts (generates its
# JPEGs), and a run past SACCADE_GPU_FEED_RUN_TIMEOUT is killed (exit -1) without a GPU.
# (Ports of its own: other tests run jobs on the configs' ports at the same time.)
if run feedargs SACCADE_GPU_CHECKS=feed SACCADE_GPU_FEED_ACTORS=1 \
  SACCADE_GPU_FEED_KEYS="cluster.coordinator_port=7740 cluster.data_port_base=7750 cluster.rollout_port_base=7820 cluster.metrics_port=0" \
  SACCADE_GPU_FEED_IMAGES=40 SACCADE_GPU_FEED_STEPS=8 SACCADE_GPU_FEED_RUN_TIMEOUT=3; then
  fail "the feed check passed without a GPU"
fi
grep -q "feed: 40 generated 500 x 375 JPEGs" "$dir/feedargs/feed.log" &&
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["feed"]["runs"]; assert [x["exit"] for x in r] == [-1], r' \
    "$dir/feedargs/feed.json" ||
  { cat "$dir/feedargs/feed.log" >&2; fail "the feed check's command line"; }
# A failed run says why where the call's output comes back: its warnings and errors in the
# check's log, and the run's own log (every process of its job) beside it.
grep -q "^    feed--1-data-actors.log: " "$dir/feedargs/feed.log" &&
  grep -q "\[coordinator:0 pid" "$dir/feedargs/feed-logs/feed--1-data-actors.log" ||
  { cat "$dir/feedargs/feed.log" >&2; fail "a failed feed run's log did not come back"; }

# Unset, the feed's levers are the config keys of the fastest step variant of the same call
# at the feed's batch that trained the same: not a failed row, not one whose losses moved,
# not another batch's; views.* left out. (A bad key in them shows which row was taken.)
mkdir -p "$dir/auto"
python3 - "$dir/auto/step.json" <<'PY'
import json, sys
row = lambda variant, batch, rate, keys, diff=0.0, failure=None: {
    "variant": variant, "batch": batch, "images_per_second": rate, "max_loss_rel_diff": diff,
    "failure": failure, "out_of_memory": False, "config_keys": keys}
rows = [row("reference", 128, 100.0, ["ssl.precision=bf16"]),
        row("failed", 128, 900.0, ["ssl.from_a_failed_row=true"], None, "device error"),
        row("moved", 128, 800.0, ["ssl.from_a_moved_row=true"], 0.5),
        row("other batch", 256, 700.0, ["ssl.from_another_batch=true"]),
        row("no keys", 128, 600.0, None),
        row("fastest", 128, 500.0, ["ssl.precision=bf16-params", "ssl.from_the_fastest=true",
                                    "views.cut_on=data"])]
json.dump({"rows": rows}, open(sys.argv[1], "w"))
PY
if run auto SACCADE_GPU_CHECKS=feed; then fail "a feed with a refused key passed"; fi
grep -q "the learner's levers: ssl.precision=bf16-params ssl.from_the_fastest=true$" "$dir/auto.txt" &&
  grep -q "from_the_fastest" "$dir/auto/feed.log" ||
  { cat "$dir/auto.txt" >&2; fail "the feed did not take the fastest same-training step variant's keys"; }

# The report's verdicts: the best MFU among step rows that trained the same (not a failed
# row, not one whose losses moved or were compared with nothing, of either step check) against 30%, the best feed that
# finished against 90% of the memory-fed rate, the GPU tests that failed by name.
# Against PyTorch: saccade's fastest such row against PyTorch's fastest at its batch.
report_case() {  # report_case NAME GOOD_MFU GOOD_FEED TORCH_RATE: fabricated check results, then the report
  mkdir -p "$dir/$1"
  python3 - "$dir/$1" "$2" "$3" "$4" <<'PY'
import json, os, sys
out, mfu, share, torch_rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
open(os.path.join(out, "gpus.txt"), "w").write("GPU 0: NVIDIA H200 (UUID: GPU-0)\n")
def row(variant, batch, mfu, diff=0.0, failure=None):
    return {"variant": variant, "batch": batch, "images_per_second": 1000 * mfu, "step_ms": 1.0,
            "tflops": 990 * mfu, "mfu": mfu, "peak_device_memory_gib": 9.5,
            "phases_ms": {"teacher": 1, "student": 2, "loss": 3, "backward": 4, "update": 5, "other": 6},
            "max_loss_rel_diff": diff, "failure": failure, "out_of_memory": False}
json.dump({"device_name": "NVIDIA H200", "flop_per_image": 2.69e11,
           "rows": [row("reference", 128, 0.10), row("moved", 128, 0.50, 0.3)],
           "products": [{"variant": "moved", "batch": 128, "products_ms_per_step": 90.0,
                         "attention_ms_per_step": 15.5, "tflops": 400.0, "peak_share": 0.404,
                         "mfu_bound": 0.333,
                         "by_kind": {"forward": {"tflops": 500.0}, "input_grad": {"tflops": 450.0},
                                     "weight_grad": {"tflops": 250.0},
                                     "attention_forward": {"tflops": 300.0},
                                     "attention_backward": {"tflops": 200.0}}},
                        {"variant": "moved", "batch": 512, "failure": "out of memory"}]},
          open(os.path.join(out, "step.json"), "w"))
json.dump({"device_name": "NVIDIA H200", "flop_per_image": 2.69e11,
           "rows": [row("large reference", 256, 0.20), row("good", 512, mfu),
                    dict(row("failed", 512, 0.9, None, "device error"), mfu=None),
                    dict(row("reference out of memory", 384, 0.9, None, "out of device memory"),
                         mfu=None, out_of_memory=True),
                    row("unchecked", 384, 0.70, None)]},
          open(os.path.join(out, "step_large.json"), "w"))
runs = [{"data_actors": n, "images_per_second": 100 * s, "of_memory_fed": s, "data_wait_share": 0.1,
         "wire_bytes_per_second": 5e7, "host_cores": 1.5, "exit": code}
        for n, s, code in ((1, 0.5, 0), (4, share, 0), (8, 0.99, 3))]
json.dump({"feed": {"device": "cuda", "batch": 128, "cut_on": "learner",
                    "memory_fed_images_per_second": 300.0, "runs": runs}},
          open(os.path.join(out, "feed.json"), "w"))
def torch_row(variant, rate, failure=None):
    return {"variant": variant, "batch": 512, "images_per_second": rate, "step_ms": 2.0,
            "tflops": 0.269 * rate, "mfu": 0.269 * rate / 989.4, "peak_device_memory_gib": 80.0,
            "warmup_s": 61.0, "losses": [12.3], "failure": failure}
json.dump({"torch": "2.11.0", "device_name": "NVIDIA H200", "parameters": 44004096,
           "flop_per_image": 2.69e11, "counted_flop_per_image": 2.70e11,
           "rows": [torch_row("torch eager bf16", 0.5 * torch_rate),
                    torch_row("torch blocks bf16", torch_rate),
                    dict(torch_row("torch model bf16", 5000.0), failure="out of device memory")]},
          open(os.path.join(out, "torch_step.json"), "w"))
json.dump({"tests": 3, "failures": 1, "testsuites": [{"name": "Suite", "testsuite": [
    {"name": "A", "classname": "Suite", "result": "COMPLETED"},
    {"name": "B", "classname": "Suite", "result": "COMPLETED", "failures": [{"failure": "x"}]},
    {"name": "C", "classname": "Suite", "result": "SKIPPED"}]}]},
          open(os.path.join(out, "kernels_cuda_tests.json"), "w"))
PY
  python3 "$dir/bundle/results.py" summary "$dir/$1" '{"step": 0, "feed": 0, "kernels_cuda_tests": 1}' >/dev/null &&
    python3 "$dir/bundle/results.py" report "$dir/$1" >"$dir/$1.txt" ||
    fail "results.py could not report $1"
  cmp -s "$dir/$1.txt" "$dir/$1/report.md" || fail "the printed report is not report.md"
}
report_case met 0.31 0.93 250
grep -qF -- '- Step MFU: best 31.0% (`good`, batch 512, 310.0 images/s, step_large); target >= 30%: met' "$dir/met.txt" &&
  grep -qF -- '- Feed (`feed`, cut on the learner): best 93.0% of the memory-fed rate with 4 data actors; target >= 90%: met' "$dir/met.txt" &&
  grep -qF -- '- kernels_cuda_tests: 1 of 2 passed, 1 skipped; **failed**: Suite.B' "$dir/met.txt" &&
  grep -qF -- '- Exit codes: **not 0**: kernels_cuda_tests 1; 0: 2' "$dir/met.txt" &&
  grep -qF '| `failed` | 512 | failed: device error |' "$dir/met.txt" &&
  grep -qF -- '- `moved` at batch 128, products and attention alone: 90.0 + 15.5 ms per step, 400.0 TFLOP/s (40.4% of peak); the step'"'"'s MFU cannot pass 33.3% while they run at this rate (TFLOP/s by kind: forward 500.0, input gradients 450.0, weight gradients 250.0, attention forward 300.0, attention backward 200.0)' "$dir/met.txt" &&
  grep -qF -- '- `moved` at batch 512, products and attention alone: failed: out of memory' "$dir/met.txt" &&
  grep -qE '^\| `unchecked` \| 384 \|.*\| unchecked \|$' "$dir/met.txt" &&
  grep -qF -- '- Against PyTorch (batch 512): saccade 310.0 images/s (`good`), PyTorch 250.0 (`torch blocks bf16`): 1.24x, ahead' "$dir/met.txt" &&
  grep -qF '| `torch model bf16` | 512 | failed: out of device memory |' "$dir/met.txt" &&
  grep -qF '44,004,096 parameters, checked against saccade'"'"'s; 269.0 GFLOP per image by saccade'"'"'s count, 270.0 counted by torch' "$dir/met.txt" ||
  { cat "$dir/met.txt" >&2; fail "the report's verdicts (targets met)"; }
report_case short 0.29 0.89 300
grep -qF 'best 29.0% (`good`, batch 512, 290.0 images/s, step_large); target >= 30%: **not met**' "$dir/short.txt" &&
  grep -qF 'saccade 290.0 images/s (`good`), PyTorch 300.0 (`torch blocks bf16`): 0.97x, **behind**' "$dir/short.txt" &&
  grep -qF 'best 89.0% of the memory-fed rate with 4 data actors; target >= 90%: **not met**' "$dir/short.txt" ||
  { cat "$dir/short.txt" >&2; fail "the report's verdicts (targets not met)"; }

# A fault costs only what it hit. The step bench runs again with --resume after a lost
# device (exit 75) and after a segmentation fault, until it ends otherwise; a GPU test binary
# that failed runs the tests it did not pass again, each alone, and the report names the
# tests that fail alone, not those that failed after another broke their process.
if run faults SACCADE_GPU_CHECKS="kernels_cuda_tests pretrain_cuda_tests step" \
  FAKE_STEP="$dir/fake-step.log"; then
  fail "a call with failed tests and a lost device exited 0"
fi
[[ "$(cat "$dir/faults/rc/step") $(cat "$dir/faults/rc/step-resumed-1") $(cat "$dir/faults/rc/step-resumed-2") $(cat "$dir/faults/rc/step_large") $(cat "$dir/faults/rc/step_small")" == "75 139 0 0 0" ]] ||
  { cat "$dir/faults.txt" >&2; fail "the step check was not resumed after its faults"; }
[[ $(grep -c -- "--resume" "$dir/fake-step.log") == 2 ]] &&
  sed -n 1p "$dir/fake-step.log" | grep -qv -- "--resume" &&
  sed -n 3p "$dir/fake-step.log" | grep -q -- "--json $dir/faults/step.json.*--resume$" &&
  sed -n 4p "$dir/fake-step.log" | grep -qv -- "--resume" &&
  sed -n 5p "$dir/fake-step.log" | grep -qF -- "--batch 16,32,64 --variants bf16-params+sdpa+foreach+fold+batched+graphs+prefetch+addnorm --json $dir/faults/step_small.json" ||
  { cat "$dir/fake-step.log" >&2; fail "--resume was not given to exactly the reruns"; }
grep -qF -- '- kernels_cuda_tests: 1 of 3 passed; **failed**: Suite.B, Suite.C; run alone: 1 of 2 passed, **failed alone**: Suite.B' "$dir/faults.txt" &&
  grep -qF -- '- pretrain_cuda_tests: no result (it stopped before writing one); run alone: 1 of 2 passed, **failed alone**: Train.T2 (died)' "$dir/faults.txt" &&
  grep -qF 'step 75 (device lost: resumed), step-resumed-1 139 (segmentation fault)' "$dir/faults.txt" ||
  { cat "$dir/faults.txt" >&2; fail "the report of the faults"; }

# A step with no checkpoint is a failed export, named in the exit codes.
if run nostep SACCADE_GPU_CHECKS=none SACCADE_GPU_TRAIN="$dir/a.toml" SACCADE_GPU_EXPORT_STEPS=7; then
  fail "exporting a step that has no checkpoint exited 0"
fi
[[ $(cat "$dir/nostep/rc/export-a-step7") != 0 && ! -e $dir/nostep/train-a/backbone-step7.safetensors ]] ||
  fail "the export of a missing step did not fail"

# The budget stops a long run: exit code 124, checkpointed on the way out, run.sh exits 1.
# (run.sh sets its checkpoint_every_steps: at 1000000 a checkpoint can only come from the drain.)
if run budget SACCADE_GPU_CHECKS=none SACCADE_GPU_TRAIN="$dir/long.toml" SACCADE_GPU_BUDGET_S=8 \
  SACCADE_GPU_CHECKPOINT_EVERY=1000000; then
  fail "a run over its budget exited 0"
fi
[[ $(cat "$dir/budget/rc/pretrain-long") == 124 ]] ||
  { cat "$dir/budget.txt" >&2; fail "exit code $(cat "$dir/budget/rc/pretrain-long"), expected 124"; }
grep -q "checkpoint [0-9]* committed" "$dir/budget/pretrain-long.log" ||
  { cat "$dir/budget/pretrain-long.log" >&2; fail "the stopped run did not checkpoint"; }
# ...and that checkpoint's teacher comes back as the run's backbone, ready for `probe --backbone`.
[[ -s $dir/budget/train-long/backbone.safetensors ]] ||
  { cat "$dir/budget/pretrain-long.log" >&2; fail "the stopped run's checkpoint was not exported"; }
[[ $(cat "$dir/budget/rc/export-long" 2>/dev/null) == 0 ]] ||
  fail "the last checkpoint's export has no exit code 0 in rc/ (summary.json)"

# Refused before anything runs.
if run bad SACCADE_GPU_CHECKS="model nonsense"; then fail "an unknown check ran"; fi
grep -q "unknown check 'nonsense'" "$dir/bad.txt" || { cat "$dir/bad.txt" >&2; fail "unknown check not named"; }
if run missing SACCADE_GPU_CHECKS=none SACCADE_GPU_TRAIN="$dir/a.toml $dir/nope.toml"; then
  fail "a missing config ran"
fi
grep -q "no config file '$dir/nope.toml'" "$dir/missing.txt" || { cat "$dir/missing.txt" >&2; fail "missing config not named"; }
[[ ! -e $dir/missing/train-a ]] || fail "a refused call started a run"
if run nothing SACCADE_GPU_CHECKS=none; then fail "nothing to run exited 0"; fi
grep -q "nothing to run" "$dir/nothing.txt" || { cat "$dir/nothing.txt" >&2; fail "no reason given"; }
if ! command -v nvidia-smi >/dev/null; then
  set +e
  OUT="$dir/nogpu" bash "$dir/bundle/run.sh" >"$dir/nogpu.txt" 2>&1
  code=$?
  set -e
  [[ $code == 3 ]] && grep -q "no NVIDIA GPU here" "$dir/nogpu.txt" ||
    { cat "$dir/nogpu.txt" >&2; fail "without a GPU: exit $code, expected 3"; }
fi
echo "gpu_run_test: ok"
