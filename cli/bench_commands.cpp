// saccade bench extract | data | model | step | allreduce | runtime | rollouts: benchmarks
// that print figures.
#include <iostream>

#include "bench/data/data_bench.h"
#include "bench/kernels/extract_bench.h"
#include "bench/learner/allreduce_bench.h"
#include "bench/learner/step_bench.h"
#include "bench/model/model_bench.h"
#include "bench/policy/rollout_bench.h"
#include "bench/runtime/runtime_bench.h"
#include "cli/commands.h"
#include "cli/torch_commands.h"

namespace saccade::cli {

void add_bench_commands(CLI::App& app, GlobalOptions&) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print figures (and write JSON)");
  bench->require_subcommand(1);

  static saccade::bench::ExtractBenchOptions extract;
  static bool quick = false, no_photos = false, no_baseline = false, no_cuda = false;
  CLI::App* e = bench->add_subcommand(
      "extract",
      "Integral-image extraction vs an image pyramid and crop-resize: build time, memory, "
      "per-patch cost and accuracy by image size");
  e->add_option("--sizes", extract.sizes, "Square RGB image sides, e.g. 256,4096")
      ->delimiter(',')
      ->capture_default_str();
  e->add_option("--photos", extract.photos, "JPEG/PNG files (default: the installed wallpapers)");
  e->add_option("--patch-size", extract.patch_size, "P")->capture_default_str();
  e->add_option("--threads", extract.threads, "Thread counts to measure, e.g. 1,0 (0 = all cores)")
      ->delimiter(',')
      ->capture_default_str();
  e->add_option("--repetitions", extract.repetitions, "Repetitions of the integral method (median)")
      ->capture_default_str();
  e->add_option("--json", extract.json_path, "Also write the figures as JSON here");
  e->add_option("--accuracy-patches", extract.accuracy_patches,
                "Patches per image scored against the exact box average (0 = none)")
      ->capture_default_str();
  e->add_flag("--fresh-gazes", extract.fresh_gazes,
              "New random gazes per repetition (no lines cached by the previous one)");
  e->add_flag("--cold-cache", extract.cold_cache,
              "Evict the caches before every step (untimed): the table is out of cache at every "
              "size");
  e->add_option("--cuda-sizes", extract.cuda_sizes,
                "Square image sides of the CUDA rows, e.g. 1024,4096")
      ->delimiter(',')
      ->capture_default_str();
  e->add_option("--cuda-patches", extract.cuda_patches, "Patches per CUDA batch")
      ->capture_default_str();
  e->add_flag("--no-photos", no_photos, "Synthetic images only");
  e->add_flag("--no-baseline", no_baseline, "Skip crop-resize (slow on large images)");
  e->add_flag("--quick", quick, "Small sizes, one repetition: a smoke run");
  e->add_flag("--no-cuda", no_cuda, "Skip the CUDA rows (on by default where a device is present)");
  e->callback([] {
    if (quick) {
      extract.sizes = {256, 1024};
      extract.repetitions = 1;
      extract.default_photos = false;
    }
    if (no_photos) extract.default_photos = false;
    if (no_baseline) extract.baseline = false;
    if (no_cuda) extract.cuda = false;
    if (const int rc = saccade::bench::run_extract_bench(extract); rc != 0) throw Exit{rc};
  });

  static saccade::bench::DataBenchOptions data;
  static bool no_photos_data = false;
  CLI::App* d = bench->add_subcommand(
      "data",
      "A data actor's cost per image on one core, by stage (read, decode, table build, cut, "
      "augment, encode, send) beside decoding alone, on generated ImageNet-size JPEGs and photos");
  d->add_option("config", data.config_path, "Job config ([views], [data])")
      ->required()
      ->check(CLI::ExistingFile);
  d->add_option("--generated", data.generated, "Generated JPEGs (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  d->add_option("--generated-size", data.generated_width, "Their width")->capture_default_str();
  d->add_option("--generated-height", data.generated_height, "Their height")->capture_default_str();
  d->add_option("--photos", data.photos, "Image files (default: the installed wallpapers)");
  d->add_option("--max-photos", data.max_photos, "Default photos used at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  d->add_flag("--no-photos", no_photos_data, "Generated images only");
  d->add_option("--batch", data.batch, "Images per encoded frame")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  d->add_option("--json", data.json_path, "Also write the rows as JSON here");
  d->callback([] {
    if (no_photos_data) data.default_photos = false;
    if (const int rc = saccade::bench::run_data_bench(data, std::cout); rc != 0) throw Exit{rc};
  });

  static saccade::model::ModelBenchOptions model;
  static bool no_vit_mode = false;
  CLI::App* m = bench->add_subcommand("model",
                                      "Foveal ViT step: fwd+bwd time and peak memory per preset, "
                                      "image-size independence, ViT vs foveal FLOPs");
  m->add_option("--presets", model.presets, "tiny, vit_s")->capture_default_str();
  m->add_option("--batch", model.batch, "Batch size")->capture_default_str();
  m->add_option("--iters", model.iters, "Timed iterations per row (median)")->capture_default_str();
  m->add_option("--threads", model.threads, "Torch threads")->capture_default_str();
  m->add_option("--device", model.device, "cpu or cuda[:i]")->capture_default_str();
  m->add_flag("--bf16", model.bf16, "bfloat16 model and inputs");
  m->add_flag("--no-vit-mode", no_vit_mode, "Skip the ViT-mode (256-patch) rows");
  m->add_option("--json", model.json_path, "Also write the rows as JSON here");
  m->callback([] {
    if (no_vit_mode) model.vit_mode = false;
    auto* entry = reinterpret_cast<int (*)(const saccade::model::ModelBenchOptions*)>(
        torch_entry("saccade_torch_bench_model"));
    if (const int rc = entry(&model); rc != 0) throw Exit{rc};
  });

  static saccade::bench::StepBenchOptions step;
  CLI::App* st = bench->add_subcommand(
      "step",
      "The full sequential-to-global training step of a config on one device (synthetic batches "
      "of its view shapes): images/s, model TFLOP/s, MFU, time per phase and losses per variant "
      "of the step's levers");
  st->add_option("config", step.config_path, "Job config (model, views, ssl)")
      ->required()
      ->check(CLI::ExistingFile);
  st->add_option("--device", step.device, "cpu or cuda[:i]")->capture_default_str();
  st->add_option("--batch", step.batches,
                 "Images per step, e.g. 64,128 (default: the config's batch per learner)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  st->add_option(
        "--variants", step.variants,
        "Levers joined by '+', one variant each, e.g. fp32,bf16,bf16+sdpa+foreach "
        "(fp32|bf16|bf16-params as ssl.precision, sdpa: fused attention, foreach: "
        "multi-tensor AdamW/EMA, fold: LayerScale folded into the linear before it, addnorm: "
        "each residual add and the LayerNorm after it as one fused operation (ssl.fused_add_norm), "
        "mlp: the MLP's tanh GELU inside its products (ssl.fused_mlp, model.gelu = tanh), "
        "bgrad: bias gradients inside the weight gradients' products (ssl.fused_bias_grad), "
        "sync: a "
        "device synchronisation after every phase, cut: the trainer cuts the views from the "
        "images (views.cut_on = learner), batched: the student's glimpses 2..S in one pass "
        "(ssl.batched_glimpses), graphs: the teacher's forward as one CUDA graph "
        "(ssl.cuda_graphs), prefetch: each step copies the next batch to the device while it "
        "runs (ssl.prefetch_to_device); config: the config's training path, the default)")
      ->delimiter(',');
  st->add_option("--warmup", step.warmup, "Untimed steps per variant")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  st->add_option("--steps", step.steps, "Timed steps per variant")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  st->add_option("--phase-steps", step.phase_steps,
                 "Steps timed per phase afterwards (synchronised on a GPU)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  st->add_option("--peak-tflops", step.peak_tflops,
                 "The device's peak TFLOP/s (default: ssl.peak_tflops or the device table)")
      ->check(CLI::Range(0.0, 1e6));
  st->add_option("--image-width", step.image_width, "Width of the images the views are cut from")
      ->capture_default_str()
      ->check(CLI::Range(16, 65535));
  st->add_option("--image-height", step.image_height, "Their height")
      ->capture_default_str()
      ->check(CLI::Range(16, 65535));
  st->add_option("--threads", step.threads, "Torch threads (default: ssl.threads)")
      ->check(CLI::Range(0, 4096));
  st->add_option("--json", step.json_path, "Also write the rows as JSON here");
  st->add_flag("--resume", step.resume,
               "With --json: keep the rows that file holds (a run of the same options the device "
               "lost, exit 75, or a fault killed) and measure only the variants it lacks")
      ->needs("--json");
  st->add_option("--variant-timeout", step.variant_timeout_s,
                 "Seconds one variant may run; past them the process ends with exit 75, the "
                 "variant named running in --json, for --resume (default: no limit)")
      ->check(CLI::NonNegativeNumber);
  st->add_option("--profile", step.profile_path,
                 "Write a Kineto trace (Chrome JSON) of one more step of the last variant here "
                 "(LibTorch >= 2)");
  st->add_flag("--products", step.products,
               "After the variants at each batch: the step's matrix products alone, at the last "
               "variant's shapes and precision (their TFLOP/s, and the MFU the step cannot pass "
               "while they run at that rate)");
  st->callback([] {
    auto* entry = reinterpret_cast<int (*)(const saccade::bench::StepBenchOptions*)>(
        torch_entry("saccade_torch_bench_step"));
    if (const int rc = entry(&step); rc != 0) throw Exit{rc};
  });

  static saccade::bench::AllreduceBenchOptions allreduce;
  CLI::App* a = bench->add_subcommand(
      "allreduce",
      "Gradient all-reduce through the learners' c10d group in real processes (Gloo on CPU, "
      "NCCL on GPUs): checked sums, time and bandwidth per size");
  a->add_option("--world-size", allreduce.world_size, "Processes (ranks)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  a->add_option("--device", allreduce.device, "cpu (Gloo) or cuda (NCCL; rank r on GPU r % GPUs)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  a->add_option("--megabytes", allreduce.megabytes, "Tensor sizes (float32), e.g. 1,16,64")
      ->delimiter(',')
      ->capture_default_str();
  a->add_option("--iterations", allreduce.iterations, "Timed all-reduces per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  a->add_option("--store-host", allreduce.store_host, "Address of rank 0's TCPStore")
      ->capture_default_str();
  a->add_option("--store-port", allreduce.store_port, "Port of rank 0's TCPStore")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  a->add_option("--timeout", allreduce.timeout_s, "Seconds for the rendezvous and each collective")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  a->add_option("--json", allreduce.json_path, "Also write the figures as JSON here (rank 0)");
  a->add_option("--rank", allreduce.rank, "Internal: run as this rank (the launcher sets it)")
      ->check(CLI::Range(0, 1023));
  a->callback([] {
    auto* entry = reinterpret_cast<int (*)(const saccade::bench::AllreduceBenchOptions*)>(
        torch_entry("saccade_torch_bench_allreduce"));
    if (const int rc = entry(&allreduce); rc != 0) throw Exit{rc};
  });

  static saccade::bench::RuntimeBenchOptions runtime;
  static bool skip_throughput = false, skip_recovery = false, skip_data = false;
  CLI::App* r = bench->add_subcommand(
      "runtime",
      "The distributed runtime's cost: saccade run vs pretrain images/s, 2 learners x b vs 1 x 2b, "
      "kill -9 to training again, data path batches/s and latency, and (--feed) one learner fed "
      "by 1..N data actors against the same trainer fed from memory");
  r->add_option("config", runtime.config_path, "Job config (variants are derived from it)")
      ->required()
      ->check(CLI::ExistingFile);
  r->add_option("--steps", runtime.steps, "Optimiser steps per throughput run")
      ->capture_default_str()
      ->check(CLI::Range(8, 1000000));
  r->add_option("--work-root", runtime.work_root, "Folder of the variants' work dirs and logs");
  r->add_option("--data-batches", runtime.data_batches, "Batches per data path measurement")
      ->capture_default_str()
      ->check(CLI::Range(4, 100000));
  r->add_option("--json", runtime.json_path, "Also write the figures as JSON here");
  r->add_flag("--no-throughput", skip_throughput, "Skip the four throughput runs");
  r->add_flag("--no-recovery", skip_recovery, "Skip the kill -9 run");
  r->add_flag("--no-data-path", skip_data, "Skip the data path measurement");
  r->add_option("--feed", runtime.feed_actors,
                "Data-actor counts of the feed runs, e.g. 1,2,4,8,14: saccade run with one "
                "learner on --device and that many data actors (one loader thread each) against "
                "the same trainer fed from memory (saccade bench step)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  r->add_option("--feed-images", runtime.feed_images,
                "Generated 500 x 375 JPEGs the feed runs read from tar shards (0: the config's "
                "data)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000000));
  r->add_option("--device", runtime.device, "The feed runs' learner: cpu or cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  r->add_option("--run-timeout", runtime.run_timeout_s,
                "Seconds a run may take; one still going is killed (exit -1 in its row) and the "
                "next runs")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  r->callback([] {
    runtime.throughput = !skip_throughput;
    runtime.recovery = !skip_recovery;
    runtime.data_path = !skip_data;
    if (const int rc = saccade::bench::run_runtime_bench(runtime); rc != 0) throw Exit{rc};
  });

  static saccade::bench::RolloutBenchOptions rollouts;
  CLI::App* ro = bench->add_subcommand(
      "rollouts",
      "GRPO rollout throughput over the real protocol with 1..N rollout actors (the config's "
      "backbone, or a simulated cost per trace): traces/s, speed-up and fraction of linear");
  ro->add_option("config", rollouts.config_path, "Job config (model, views, [policy])")
      ->required()
      ->check(CLI::ExistingFile);
  ro->add_option("--actors", rollouts.actors, "Actor counts to measure, e.g. 1,2,4")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  ro->add_option("--trace-ms", rollouts.trace_ms,
                 "Simulate the backbone: this many ms per trace (0 = the config's backbone)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10000.0));
  ro->add_option("--batches", rollouts.batches, "Batches measured per actor count")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  ro->add_option("--batch-images", rollouts.batch_images,
                 "Images per rollout batch (0 = policy.batch_size)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  ro->add_option("--threads-per-actor", rollouts.threads_per_actor,
                 "Torch threads of each actor (the config's backbone)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  ro->add_option("--json", rollouts.json_path, "Also write the figures as JSON here");
  ro->callback([] {
    auto* entry = reinterpret_cast<int (*)(const saccade::bench::RolloutBenchOptions*)>(
        torch_entry("saccade_torch_bench_rollouts"));
    if (const int rc = entry(&rollouts); rc != 0) throw Exit{rc};
  });
}

}  // namespace saccade::cli
