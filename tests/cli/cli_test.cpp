// The saccade binary, run for real as a child process.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace saccade {
namespace {

using testing::build_path;
using testing::run_process;

testing::ProcessResult saccade(std::vector<std::string> args) {
  args.insert(args.begin(), build_path("saccade"));
  return run_process(args);
}

// Every subcommand, as `saccade --help` lists them, answers --help.
TEST(Cli, EverySubcommandHasHelp) {
  const auto root = saccade({"--help"});
  ASSERT_EQ(root.exit_code, 0) << root.err;
  std::vector<std::vector<std::string>> commands = {{"config"},
                                                    {"config", "check"},
                                                    {"config", "show"},
                                                    {"config", "docs"},
                                                    {"info"},
                                                    {"bench"},
                                                    {"bench", "extract"},
                                                    {"bench", "model"},
                                                    {"bench", "allreduce"},
                                                    {"bench", "step"},
                                                    {"bench", "data"},
                                                    {"pretrain"},
                                                    {"data"},
                                                    {"data", "pack"},
                                                    {"coordinator"},
                                                    {"agent"},
                                                    {"actor"},
                                                    {"status"},
                                                    {"run"},
                                                    {"keys"},
                                                    {"keys", "generate"}};
  for (const auto& cmd : commands) {
    if (cmd.size() == 1) {
      EXPECT_NE(root.out.find("  " + cmd[0] + " "), std::string::npos) << cmd[0];
    }
    auto args = cmd;
    args.push_back("--help");
    const auto r = saccade(args);
    EXPECT_EQ(r.exit_code, 0) << cmd.back() << ": " << r.err;
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << cmd.back();
  }
}

TEST(Cli, NoSubcommandIsAnError) {
  const auto r = saccade({});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("subcommand"), std::string::npos) << r.err;
}

// OpenBLAS took a CPU it did not know for a Prescott (SSE3, ~3x slower products); saccade
// re-executes itself with the kernels the CPU can run, and a core the user names stands.
TEST(Cli, InfoNamesTheOpenblasCoreAndItIsOneForThisCpu) {
  const auto core_line = [](const testing::ProcessResult& r) {
    const size_t at = r.out.find("OpenBLAS core: ");
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find('\n', at) - at);
  };
  const auto chosen = run_process({"/usr/bin/env", "-u", "OPENBLAS_CORETYPE", "-u",
                                   "SACCADE_OPENBLAS_DETECTED", build_path("saccade"), "info"});
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  const std::string line = core_line(chosen);
  ASSERT_FALSE(line.empty()) << chosen.out;
  if (line.find("none (not loaded)") != std::string::npos) GTEST_SKIP() << "no OpenBLAS";
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2");
  for (const char* without_avx : {"Prescott", "Core2", "Penryn", "Nehalem", "Atom", "Unknown"}) {
    const std::string generic = std::string("OpenBLAS core: ") + without_avx + " ";
    EXPECT_FALSE(avx2 && line.rfind(generic, 0) == 0) << line;
  }
  if (line.find("set by saccade") != std::string::npos) {
    const bool avx512 = __builtin_cpu_supports("avx512bw");
    EXPECT_EQ(line.rfind(avx512 ? "OpenBLAS core: SkylakeX " : "OpenBLAS core: Haswell ", 0), 0u)
        << line;
  }
  if (!__builtin_cpu_supports("avx")) return;
  const auto named =
      run_process({"/usr/bin/env", "OPENBLAS_CORETYPE=Sandybridge", build_path("saccade"), "info"});
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(core_line(named), "OpenBLAS core: Sandybridge (OPENBLAS_CORETYPE=Sandybridge)");
}

TEST(Cli, ConfigCheckAcceptsShippedAndRefusesBad) {
  const auto good = saccade({"config", "check", testing::source_path("configs/tiny.toml")});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.out.find("tiny.toml: ok"), std::string::npos);

  const testing::TempDir scratch("cli");
  const std::filesystem::path path = scratch.path() / "bad.toml";
  std::ofstream(path) << "[model]\ndepth = -1\n";
  const auto bad = saccade({"config", "check", path.string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(
      bad.err.find(path.string() + ":2:9: model.depth: expected an integer in [1, 128], got -1"),
      std::string::npos)
      << bad.err;
}

// A learner batch that cannot travel in cluster.max_message_bytes is refused before anything
// starts (the learner would fail at start, over and over), naming the bytes that fit it.
TEST(Cli, ALearnerBatchOverTheFrameLimitIsRefusedBeforeTheJobStarts) {
  const testing::TempDir scratch("cli-frames");
  const std::filesystem::path big = scratch.path() / "big.toml";
  // 64 learners of 128 images that ship images up to 1024 x 1024 x 3 bytes: 412 MB frames.
  std::ofstream(big) << "include = \"" << testing::source_path("configs/vit-s-imagenet.toml")
                     << "\"\n[job]\nwork_dir = \"" << (scratch.path() / "run").string()
                     << "\"\n[views]\ncut_on = \"learner\"\n[ssl]\nbatch_size = 8192\n";
  const std::string why =
      "cluster.max_message_bytes: a learner's batch of 128 images (ssl.batch_size = 8192 over "
      "64 learners) needs frames of up to 411713536 bytes (views.cut_on = \"learner\" ships "
      "images of up to views.ship_max_side = 1024 pixels a side), over the limit of 268435456: "
      "raise cluster.max_message_bytes to at least 411713536";
  const auto check = saccade({"config", "check", big.string()});
  EXPECT_EQ(check.exit_code, 2);
  EXPECT_NE(check.err.find(big.string() + ": " + why), std::string::npos) << check.err;
  const auto run = saccade({"run", big.string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find(why), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(scratch.path() / "run")) << "the job started";

  // The bytes it names fit; so does the batch cut by the data actors (1.95 MB per image).
  const std::filesystem::path raised = scratch.path() / "raised.toml";
  std::ofstream(raised) << "include = \"big.toml\"\n[cluster]\nmax_message_bytes = 411713536\n";
  const auto fits = saccade({"config", "check", raised.string()});
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  const std::filesystem::path data_cuts = scratch.path() / "data-cuts.toml";
  std::ofstream(data_cuts) << "include = \"big.toml\"\n[views]\ncut_on = \"data\"\n";
  const auto data = saccade({"config", "check", data_cuts.string()});
  EXPECT_EQ(data.exit_code, 0) << data.err;
  // A Slurm template's learners are per node: the batch splits over the allocation's nodes,
  // known when the launch resolves them, so the check waits for that.
  const std::filesystem::path slurm = scratch.path() / "slurm.toml";
  std::ofstream(slurm) << "[cluster]\nnodes_from = \"slurm\"\n[[cluster.nodes]]\n"
                          "name = \"template\"\ndata_actors = 8\nlearners = 8\n"
                          "[views]\ncut_on = \"learner\"\n[ssl]\nbatch_size = 1024\n";
  const auto templated = saccade({"config", "check", slurm.string()});
  EXPECT_EQ(templated.exit_code, 0) << templated.err;
}

// The extraction benchmark's accuracy columns: the integral image is the exact box
// average, the pyramid and crop-resize are not, and every method is timed.
TEST(Cli, BenchExtractScoresEveryMethodAgainstTheExactBoxAverage) {
  const testing::TempDir scratch("cli-bench");
  const std::string json_path = (scratch.path() / "extract.json").string();
  const auto r = saccade({"bench", "extract", "--sizes", "96", "--no-photos", "--repetitions", "1",
                          "--threads", "1", "--accuracy-patches", "50", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.at("results").size(), 1u);
  const auto& t = j.at("results")[0];
  EXPECT_GT(t.at("integral_us_per_patch").get<double>(), 0);
  EXPECT_GT(t.at("pyramid_us_per_patch").get<double>(), 0);
  EXPECT_GT(t.at("crop_resize_us_per_patch").get<double>(), 0);
  EXPECT_LT(t.at("pyramid_bytes").get<double>(), t.at("table_bytes").get<double>());
  ASSERT_EQ(j.at("accuracy").size(), 1u);
  const auto& a = j.at("accuracy")[0];
  EXPECT_EQ(a.at("patches").get<int>(), 50);
  EXPECT_LT(a.at("integral_worst_abs").get<double>(), 1e-3);
  EXPECT_GT(a.at("pyramid_mean_abs").get<double>(), 0.1);
  EXPECT_GT(a.at("crop_resize_mean_abs").get<double>(), 0.01);  // uint8 rounding at least
}

// Lists take commas, as the docs and scripts/gpu/run.sh write them.
TEST(Cli, BenchExtractTakesCommaSeparatedLists) {
  const testing::TempDir scratch("cli-bench-lists");
  const std::string json_path = (scratch.path() / "extract.json").string();
  const auto r = saccade({"bench", "extract", "--sizes", "64,96", "--no-photos", "--no-baseline",
                          "--repetitions", "1", "--threads", "1", "--accuracy-patches", "0",
                          "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.at("results").size(), 2u);
  EXPECT_EQ(j.at("results")[0].at("height").get<int>(), 64);
  EXPECT_EQ(j.at("results")[1].at("height").get<int>(), 96);
}

// Two real rank processes through the learners' Gloo group: checked sums and figures;
// a rank that cannot start its device fails the whole run with its reason.
TEST(Cli, BenchAllreduceChecksTheSumAcrossRealProcesses) {
  const testing::TempDir scratch("cli-allreduce");
  const std::string json_path = (scratch.path() / "allreduce.json").string();
  const auto r = saccade({"bench", "allreduce", "--world-size", "2", "--megabytes", "0.25,1",
                          "--iterations", "2", "--store-port", "29671", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("backend").get<std::string>(), "gloo");
  EXPECT_EQ(j.at("world_size").get<int>(), 2);
  EXPECT_TRUE(j.at("checked").get<bool>());
  ASSERT_EQ(j.at("rows").size(), 2u);
  for (const auto& row : j.at("rows")) EXPECT_GT(row.at("busbw_gb_s").get<double>(), 0);

  if (!std::filesystem::exists("/dev/nvidia0")) {
    const auto no_gpu = saccade(
        {"bench", "allreduce", "--device", "cuda", "--store-port", "29672", "--timeout", "10"});
    EXPECT_EQ(no_gpu.exit_code, 1);
    EXPECT_NE(no_gpu.err.find("no CUDA device"), std::string::npos) << no_gpu.err;
    EXPECT_NE(no_gpu.err.find("2 of 2 ranks failed"), std::string::npos) << no_gpu.err;
  }
}

// The feed runs of bench runtime, for real: generated JPEGs packed into tar shards, a
// `saccade run` of one learner and one data actor, and the same trainer fed from memory;
// every figure the GPU check reads comes back measured.
TEST(Cli, BenchRuntimeFeedsOneLearnerFromDataActorsAndFromMemory) {
  const testing::TempDir scratch("cli-feed");
  const std::filesystem::path config = scratch.path() / "feed.toml";
  std::ofstream(config) << "include = \"" << testing::source_path("configs/tiny.toml") << "\"\n"
                        << "[ssl]\nbatch_size = 8\n";
  const std::string json_path = (scratch.path() / "feed.json").string();
  const auto r = saccade({"bench", "runtime", config.string(), "--no-throughput", "--no-recovery",
                          "--no-data-path", "--feed", "1", "--feed-images", "40", "--steps", "8",
                          "--work-root", (scratch.path() / "runs").string(), "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("40 generated 500 x 375 JPEGs"), std::string::npos) << r.out;
  std::ifstream in(json_path);
  const nlohmann::json feed = nlohmann::json::parse(in).at("feed");
  EXPECT_EQ(feed.at("batch").get<int>(), 8);
  EXPECT_GT(feed.at("memory_fed_images_per_second").get<double>(), 0);
  ASSERT_EQ(feed.at("runs").size(), 1u);
  const nlohmann::json& run = feed.at("runs")[0];
  EXPECT_EQ(run.at("exit").get<int>(), 0);
  EXPECT_EQ(run.at("data_actors").get<int>(), 1);
  const double ips = run.at("images_per_second").get<double>();
  EXPECT_GT(ips, 0);
  EXPECT_NEAR(run.at("of_memory_fed").get<double>(),
              ips / feed.at("memory_fed_images_per_second").get<double>(), 1e-9);
  const double wait = run.at("data_wait_share").get<double>();
  EXPECT_GE(wait, 0);
  EXPECT_LT(wait, 1);
  // Tiny views are a few KB per image; the rate is bytes per image times images/s.
  const double per_image = run.at("wire_bytes_per_second").get<double>() / ips;
  EXPECT_GT(per_image, 1e3);
  EXPECT_LT(per_image, 1e6);
  EXPECT_GT(run.at("host_cores").get<double>(), 0.1);
}

// `saccade bench step CONFIG` small and quick: batch 4 of views cut from 40 x 30 images, one
// warm-up and one phase-timed step, one thread, rows into `json_path`.
std::vector<std::string> tiny_step_args(const std::string& config, const std::string& json_path) {
  return {"bench", "step",           config, "--batch",   "4",      "--warmup",
          "1",     "--phase-steps",  "1",    "--threads", "1",      "--image-width",
          "40",    "--image-height", "30",   "--json",    json_path};
}

// A run past --run-timeout is killed (exit -1 in its row) and the next still runs: a hung
// run costs a GPU call only its own share.
TEST(Cli, BenchRuntimeKillsARunPastItsTimeoutAndGoesOn) {
  const testing::TempDir scratch("cli-feed-timeout");
  const std::string json_path = (scratch.path() / "feed.json").string();
  // Ports of its own: other tests run jobs of the tiny config at the same time.
  const std::filesystem::path config = scratch.path() / "feed.toml";
  std::ofstream(config) << "include = \"" << testing::source_path("configs/tiny.toml") << "\"\n"
                        << "[cluster]\ncoordinator_port = 7640\ndata_port_base = 7650\n"
                        << "rollout_port_base = 7700\n";
  const auto r = saccade({"bench", "runtime", config.string(), "--no-throughput", "--no-recovery",
                          "--no-data-path", "--feed", "1,2", "--feed-images", "40", "--steps",
                          "1000", "--run-timeout", "1", "--work-root",
                          (scratch.path() / "runs").string(), "--json", json_path});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  std::ifstream in(json_path);
  const nlohmann::json feed = nlohmann::json::parse(in).at("feed");
  ASSERT_EQ(feed.at("runs").size(), 2u);
  for (const auto& run : feed.at("runs")) {
    EXPECT_EQ(run.at("exit").get<int>(), -1) << run;
    EXPECT_LT(run.at("wall_s").get<double>(), 30) << run;
  }
}

// The full training step of the tiny config on the CPU, five lever variants from the same
// weights on the same batches: figures, the analytic FLOPs, MFU from the peak given, and
// losses that agree (the multi-tensor update is bit-exact with the per-parameter one, and
// the trainer cutting the views from the images gives the data plane's views); the config
// keys of a variant train as it.
TEST(Cli, BenchStepRunsTheTrainingStepPerVariantWithFlopsMfuAndLosses) {
  const testing::TempDir scratch("cli-step");
  const std::string json_path = (scratch.path() / "step.json").string();
  std::vector<std::string> args =
      tiny_step_args(testing::source_path("configs/tiny.toml"), json_path);
  args.insert(args.end(),
              {"--variants", "fp32,fp32+foreach,fp32+cut,fp32+fold,fp32+sdpa+foreach+fold+batched",
               "--steps", "2", "--peak-tflops", "1", "--products"});
  const auto r = saccade(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("GFLOP per image"), std::string::npos) << r.out;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_GT(j.at("flop_per_image").get<double>(), 1e8);
  ASSERT_EQ(j.at("rows").size(), 5u);
  for (const auto& row : j.at("rows")) {
    EXPECT_EQ(row.at("batch").get<int>(), 4);
    EXPECT_GT(row.at("images_per_second").get<double>(), 0);
    const double tflops = row.at("tflops").get<double>();
    EXPECT_NEAR(
        tflops,
        j.at("flop_per_image").get<double>() * row.at("images_per_second").get<double>() / 1e12,
        1e-9 + 1e-6 * tflops);
    EXPECT_NEAR(row.at("mfu").get<double>(), tflops / 1.0, 1e-12);
    EXPECT_EQ(row.at("losses").size(), 4u);  // warm-up, timed and phase steps
    EXPECT_GT(row.at("phases_ms").at("backward").get<double>(), 0);
    EXPECT_TRUE(row.at("peak_device_memory_gib").is_null());  // counted on CUDA devices only
    EXPECT_FALSE(row.at("out_of_memory").get<bool>());
    EXPECT_TRUE(row.at("failure").is_null());
  }
  for (const size_t other : {1, 2}) {
    EXPECT_EQ(j.at("rows")[other].at("max_loss_rel_diff").get<double>(), 0.0);
    EXPECT_EQ(j.at("rows")[0].at("losses"), j.at("rows")[other].at("losses"));
  }
  // LayerScale folded into the linear layers: the same function, rounded differently.
  EXPECT_LT(j.at("rows")[3].at("max_loss_rel_diff").get<double>(), 1e-4);
  // --products: the last variant's matrix products and attention alone (ssl::step_products
  // and step_passes, tested in SslStepFlops), their model FLOPs the step's less the embedding,
  // and the MFU bound of their time.
  ASSERT_EQ(j.at("products").size(), 1u);
  const auto& alone = j.at("products")[0];
  EXPECT_EQ(alone.at("variant"), "fp32+sdpa+foreach+fold+batched");
  const double model_flops = alone.at("model_flop_per_step").get<double>();
  EXPECT_DOUBLE_EQ(model_flops, 4 * j.at("flop_per_image").get<double>());
  double in_model = 0, carried = 0, ms = 0;
  for (const auto& row : alone.at("products")) {
    const double flops = 2.0 * row.at("m").get<double>() * row.at("k").get<double>() *
                         row.at("n").get<double>() * row.at("calls").get<double>() *
                         (row.at("backward").get<bool>() ? 3 : 1);
    (row.at("model_flops").get<bool>() ? in_model : carried) += flops;
    EXPECT_GT(row.at("forward_tflops").get<double>(), 0) << row;
    ms += row.at("ms_per_step").get<double>();
  }
  EXPECT_NEAR(alone.at("products_ms_per_step").get<double>(), ms, 1e-9 * ms);
  for (const auto& row : alone.at("attention")) {
    const double n = row.at("tokens").get<double>();
    const double flops = 4.0 * row.at("sequences").get<double>() * n * n *
                         row.at("heads").get<double>() * row.at("head_dim").get<double>() *
                         row.at("calls").get<double>() * (row.at("backward").get<bool>() ? 3 : 1);
    (row.at("model_flops").get<bool>() ? in_model : carried) += flops;
    ms += row.at("ms_per_step").get<double>();
  }
  EXPECT_GT(carried, 0);                   // batched glimpses recompute the carried states
  EXPECT_GT(in_model, 0.8 * model_flops);  // the rest: the embedding and the state input
  EXPECT_LT(in_model, model_flops);
  EXPECT_DOUBLE_EQ(alone.at("flop_per_step").get<double>(), in_model + carried);
  EXPECT_NEAR(alone.at("ms_per_step").get<double>(), ms, 1e-9 * ms);
  EXPECT_NEAR(alone.at("mfu_bound").get<double>(), model_flops / (ms / 1e3) / 1e12,
              1e-9 * model_flops / ms);
  // The same time and FLOPs by kind of work: forward products, their two gradients,
  // attention forward and backward; the gradients' FLOPs equal the forward's with gradient.
  const auto& kinds = alone.at("by_kind");
  double kind_ms = 0, kind_flops = 0;
  for (const char* kind :
       {"forward", "input_grad", "weight_grad", "attention_forward", "attention_backward"}) {
    const auto& k = kinds.at(kind);
    kind_ms += k.at("ms_per_step").get<double>();
    kind_flops += k.at("flop_per_step").get<double>();
    EXPECT_GT(k.at("flop_per_step").get<double>(), 0) << kind;
    EXPECT_NEAR(k.at("tflops").get<double>(),
                k.at("flop_per_step").get<double>() / k.at("ms_per_step").get<double>() / 1e9,
                1e-9 * k.at("tflops").get<double>())
        << kind;
  }
  EXPECT_NEAR(kind_ms, ms, 1e-9 * ms);
  EXPECT_NEAR(kind_flops, in_model + carried, 1e-9 * kind_flops);
  EXPECT_DOUBLE_EQ(kinds.at("input_grad").at("flop_per_step").get<double>(),
                   kinds.at("weight_grad").at("flop_per_step").get<double>());
  EXPECT_LT(kinds.at("input_grad").at("flop_per_step").get<double>(),
            kinds.at("forward").at("flop_per_step").get<double>());  // the carry pass has none
  EXPECT_NE(r.out.find("by kind: forward "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the step's MFU cannot pass"), std::string::npos) << r.out;
  // Batched glimpses (and the fold): the same step (detached states), rounded differently.
  EXPECT_LT(j.at("rows")[4].at("max_loss_rel_diff").get<double>(), 1e-4);

  // A row whose levers training uses names the config keys that train as it: a job made
  // from them (scripts/config_variant.sh, as run.sh's feed check makes one) gives the same
  // losses on the same batches. Rows that turn off an always-on lever name none.
  for (const size_t off : {0, 1, 2, 3}) EXPECT_TRUE(j.at("rows")[off].at("config_keys").is_null());
  const auto keys = j.at("rows")[4].at("config_keys").get<std::vector<std::string>>();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "ssl.batched_glimpses=true"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "ssl.precision=fp32"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "ssl.cuda_graphs=false"), keys.end());
  const std::string variant_path = (scratch.path() / "batched.toml").string();
  std::vector<std::string> make = {"/usr/bin/env",
                                   "SACCADE=" + build_path("saccade"),
                                   "bash",
                                   testing::source_path("scripts/config_variant.sh"),
                                   testing::source_path("configs/tiny.toml"),
                                   variant_path};
  make.insert(make.end(), keys.begin(), keys.end());
  const auto made = run_process(make);
  ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  const std::string as_config_json = (scratch.path() / "as-config.json").string();
  std::vector<std::string> as_config_args = tiny_step_args(variant_path, as_config_json);
  as_config_args.insert(as_config_args.end(), {"--steps", "2"});
  const auto as_config = saccade(as_config_args);
  ASSERT_EQ(as_config.exit_code, 0) << as_config.out << as_config.err;
  std::ifstream as_config_in(as_config_json);
  const nlohmann::json c = nlohmann::json::parse(as_config_in);
  EXPECT_EQ(c.at("rows")[0].at("losses"), j.at("rows")[4].at("losses"));
  EXPECT_EQ(c.at("rows")[0].at("config_keys"), j.at("rows")[4].at("config_keys"));

  const auto bad = saccade(
      {"bench", "step", testing::source_path("configs/tiny.toml"), "--variants", "bf16+turbo"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown lever \"turbo\""), std::string::npos) << bad.err;
  // Levers that only a GPU has are refused on a CPU, naming the variant and the lever.
  for (const auto& [variant, why] : std::vector<std::pair<std::string, std::string>>{
           {"fp32+graphs", "CUDA graphs (ssl.cuda_graphs) need --device cuda"},
           {"fp32+prefetch",
            "prefetch (ssl.prefetch_to_device) stages batches to a GPU, needs --device cuda"}}) {
    const auto on_cpu = saccade(
        {"bench", "step", testing::source_path("configs/tiny.toml"), "--variants", variant});
    EXPECT_NE(on_cpu.exit_code, 0) << variant;
    EXPECT_NE(on_cpu.err.find("--variants " + variant + ": " + why), std::string::npos)
        << on_cpu.err;
  }
}

// --resume takes up a run of the same options where it ended (the GPU call reruns a bench
// whose device a lever lost): rows it holds are kept, not measured again; the variant it was
// measuring when it ended becomes a failed row; the rest is measured, and its losses compare
// with the batch's first row from the file. A file of other options is refused by name.
TEST(Cli, BenchStepResumesWhereARunOfTheSameOptionsEnded) {
  const testing::TempDir scratch("cli-step-resume");
  const std::string json_path = (scratch.path() / "step.json").string();
  const auto bench = [&](const std::string& variants, const std::vector<std::string>& more) {
    std::vector<std::string> args =
        tiny_step_args(testing::source_path("configs/tiny.toml"), json_path);
    args.insert(args.end(), {"--variants", variants});
    args.insert(args.end(), more.begin(), more.end());
    return saccade(args);
  };
  const auto read = [&] {
    std::ifstream in(json_path);
    return nlohmann::json::parse(in);
  };
  const auto first = bench("fp32,fp32+foreach", {"--steps", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  // As a process killed while measuring fp32+foreach leaves it.
  nlohmann::json ended = read();
  EXPECT_TRUE(ended.at("running").is_null());
  const nlohmann::json fp32 = ended.at("rows")[0];
  ended.at("rows").erase(1);
  ended["running"] = {{"variant", "fp32+foreach"}, {"batch", 4}};
  std::ofstream(json_path) << ended.dump();

  const auto resumed = bench("fp32,fp32+foreach,bf16", {"--steps", "2", "--resume"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("fp32+foreach                                  4  kept from " +
                             json_path + ": failed: the process ended while measuring it"),
            std::string::npos)
      << resumed.out;
  const nlohmann::json j = read();
  EXPECT_TRUE(j.at("running").is_null());
  ASSERT_EQ(j.at("rows").size(), 3u);
  EXPECT_EQ(j.at("rows")[0], fp32);  // kept as it was, not measured again
  EXPECT_EQ(j.at("rows")[1].at("variant"), "fp32+foreach");
  EXPECT_TRUE(j.at("rows")[1].at("images_per_second").get<double>() == 0 &&
              !j.at("rows")[1].at("failure").is_null());
  const nlohmann::json& bf16 = j.at("rows")[2];
  EXPECT_EQ(bf16.at("variant"), "bf16");
  EXPECT_TRUE(bf16.at("failure").is_null());
  // Compared with fp32's losses from the file (it would be its own reference, 0, otherwise).
  EXPECT_GT(bf16.at("max_loss_rel_diff").get<double>(), 1e-6);
  EXPECT_LT(bf16.at("max_loss_rel_diff").get<double>(), 0.05);

  const auto other = bench("fp32", {"--steps", "3", "--resume"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find(json_path + " was measured with steps = 2, this run has 3"),
            std::string::npos)
      << other.err;
  EXPECT_EQ(read(), j);  // refused before anything was written
  const auto no_json =
      saccade({"bench", "step", testing::source_path("configs/tiny.toml"), "--resume"});
  EXPECT_NE(no_json.exit_code, 0);
  EXPECT_NE(no_json.err.find("--resume requires --json"), std::string::npos) << no_json.err;
}

// A variant past --variant-timeout ends the process with exit 75 (as a lost device does), the
// JSON naming it as running; --resume keeps it as a failed row and goes on with the next.
TEST(Cli, BenchStepEndsAVariantPastItsTimeoutAndResumesAfterIt) {
  const testing::TempDir scratch("cli-step-timeout");
  const std::string json_path = (scratch.path() / "step.json").string();
  std::vector<std::string> args =
      tiny_step_args(testing::source_path("configs/tiny.toml"), json_path);
  // 20 steps of ~0.1 s each: past half a second whatever the machine.
  args.insert(args.end(), {"--steps", "20", "--variant-timeout", "0.5", "--variants"});
  args.push_back("fp32");
  const auto hung = saccade(args);
  EXPECT_EQ(hung.exit_code, 75) << hung.out << hung.err;
  EXPECT_NE(hung.err.find("fp32 at batch 4 still running after 0.5 s (--variant-timeout)"),
            std::string::npos)
      << hung.err;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("running"), nlohmann::json({{"variant", "fp32"}, {"batch", 4}}));
  EXPECT_TRUE(j.at("rows").empty());

  args.back() = "fp32,fp32+foreach,bf16";
  args.push_back("--resume");
  args[std::find(args.begin(), args.end(), "--variant-timeout") - args.begin() + 1] = "0";
  const auto resumed = saccade(args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  std::ifstream again(json_path);
  const nlohmann::json k = nlohmann::json::parse(again);
  ASSERT_EQ(k.at("rows").size(), 3u);
  EXPECT_NE(k.at("rows")[0].at("failure").get<std::string>().find("--variant-timeout"),
            std::string::npos);
  EXPECT_TRUE(k.at("rows")[0].at("loss_reference").is_null());
  // The first variant that ran is the losses' reference of the rest, not the failed one.
  const nlohmann::json& foreach = k.at("rows")[1];
  EXPECT_TRUE(foreach.at("failure").is_null());
  EXPECT_EQ(foreach.at("variant"), "fp32+foreach");
  EXPECT_EQ(foreach.at("loss_reference"), "fp32+foreach");
  EXPECT_EQ(foreach.at("max_loss_rel_diff").get<double>(), 0.0);
  const nlohmann::json& bf16 = k.at("rows")[2];
  EXPECT_EQ(bf16.at("loss_reference"), "fp32+foreach");
  EXPECT_GT(bf16.at("max_loss_rel_diff").get<double>(), 1e-6);
  EXPECT_LT(bf16.at("max_loss_rel_diff").get<double>(), 0.05);
}

// The data plane's cost per stage on generated JPEGs, once with the data actor cutting and
// once shipping the image for the learner to cut: every stage measured (a learner that cuts
// builds the table itself, and the receiving learner's side is timed too), the frame's bytes
// per image those of what travels (plus a small envelope), and the pipeline slower than
// decoding alone.
TEST(Cli, BenchDataMeasuresEveryStageOfTheDataPlanePerImage) {
  const testing::TempDir scratch("cli-data");
  const std::string json_path = (scratch.path() / "data.json").string();
  const auto r = saccade({"bench", "data", testing::source_path("configs/vit-s-imagenet.toml"),
                          "--generated", "4", "--generated-size", "64", "--generated-height", "48",
                          "--no-photos", "--batch", "2", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.at("rows").size(), 2u);
  // The paper's views (configs/vit-s-imagenet.toml): C = 3, P = 16. Tokens per image: 2
  // global views of 16^2, 8 local views of 7^2, 2 sequences of 8 glimpses of 36 + 8^2:
  // 512 + 392 + 1600 = 2504, each with 3 float32 coordinates; 12 views of 13 float32
  // augmentation parameters. The data side ships 768 uint8 pixels per token, the learner
  // side a box (4 float32) per token and the 64 x 48 RGB image.
  const double common = 2504.0 * 3 * 4 + 12 * 13 * 4;
  const double shipped[2] = {common + 2504.0 * 768, common + 2504.0 * 16 + 64 * 48 * 3};
  for (int side = 0; side < 2; ++side) {
    const auto& row = j.at("rows")[side];
    SCOPED_TRACE(row.at("images").get<std::string>());
    EXPECT_EQ(row.at("count").get<int>(), 4);
    EXPECT_NEAR(row.at("megapixels").get<double>(), 64 * 48 / 1e6, 1e-9);
    for (const char* stage :
         {"read", "decode", "table", "cut", "augment", "encode", "send", "receive"}) {
      if (side == 1 && std::string(stage) == "table") {
        EXPECT_EQ(row.at("ms_per_image").at(stage).get<double>(), 0);
      } else {
        EXPECT_GT(row.at("ms_per_image").at(stage).get<double>(), 0) << stage;
      }
    }
    EXPECT_LT(row.at("pipeline_per_second").get<double>(),
              row.at("decode_only_per_second").get<double>());
    EXPECT_NEAR(row.at("receive_per_second").get<double>(),
                1e3 / row.at("ms_per_image").at("receive").get<double>(), 1e-6);
    const double bytes = row.at("bytes_per_image").get<double>();
    EXPECT_GE(bytes, shipped[side]);
    EXPECT_LT(bytes, shipped[side] + 2000);
  }
  EXPECT_NE(j.at("rows")[1].at("images").get<std::string>().find("learner cuts"),
            std::string::npos);
}

TEST(Cli, ConfigShowPrintsTheResolvedConfig) {
  const auto r = saccade({"config", "show", testing::source_path("configs/tiny.toml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("depth = 4"), std::string::npos);             // from the file
  EXPECT_NE(r.out.find("heartbeat_misses = 5"), std::string::npos);  // a default
}

}  // namespace
}  // namespace saccade
