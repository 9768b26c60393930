#include "common/config.h"

#include <gtest/gtest.h>

#include "tests/support/paths.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace saccade {
namespace {

// The refusal's full text, or "" when the config is accepted.
std::string refusal(const std::string& toml) {
  try {
    parse_config(toml, "job.toml");
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST(Config, DefaultsResolveToThePapersSetting) {
  const JobConfig c = default_config();
  EXPECT_EQ(c.model.depth, 12);
  EXPECT_EQ(c.model.width, 384);
  EXPECT_EQ(c.model.heads, 6);
  EXPECT_EQ(c.model.n_state, 8);
  EXPECT_EQ(c.model.patch_size, 16);
  EXPECT_EQ(c.ssl.head_prototypes, 65536);
  EXPECT_DOUBLE_EQ(c.ssl.lr, 0.002);
  EXPECT_DOUBLE_EQ(c.ssl.teacher_temp_start, 0.04);
  EXPECT_DOUBLE_EQ(c.views.global_scale_min, 0.32);
  EXPECT_EQ(c.views.glimpses, 8);
  ASSERT_EQ(c.cluster.nodes.size(), 1u);
  EXPECT_EQ(c.cluster.nodes[0].name, "local");
  EXPECT_EQ(c.cluster.nodes[0].learners, 1);
  EXPECT_EQ(c.data.pixel_mean.size(), 3u);
  EXPECT_EQ(c.job.stages, (std::vector<std::string>{"pretrain"}));  // a job runs what it lists
}

TEST(Config, AKeyOverridesOnlyItself) {
  const JobConfig c = parse_config("[model]\ndepth = 4\n", "job.toml");
  EXPECT_EQ(c.model.depth, 4);
  EXPECT_EQ(c.model.width, 384);
}

TEST(Config, ShippedConfigsValidate) {
  int n = 0;
  // The presets and configs/ablations, whose files mostly include a base.
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(testing::source_path("configs"))) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(load_config(entry.path()));
    ++n;
  }
  EXPECT_GE(n, 40);
  const JobConfig vit_s = load_config(testing::source_path("configs/vit-s-imagenet.toml"));
  EXPECT_EQ(vit_s.cluster.nodes.size(), 8u);
  EXPECT_EQ(vit_s.cluster.nodes[7].gpus, 8);
  // The levers of the fastest step measured on a GPU (docs/model.md), and none measured slower.
  EXPECT_EQ(vit_s.ssl.precision, "bf16-params");
  EXPECT_TRUE(vit_s.ssl.batched_glimpses && vit_s.ssl.cuda_graphs && vit_s.ssl.prefetch_to_device &&
              vit_s.ssl.fused_add_norm);
  EXPECT_FALSE(vit_s.ssl.fused_mlp || vit_s.ssl.fused_bias_grad);
}

TEST(Config, UnknownKeyNamesFileLineKeyAndSuggestion) {
  EXPECT_EQ(refusal("[model]\ndept = 3\n"),
            "job.toml:2:1: model.dept: unknown key; did you mean 'depth'?");
}

TEST(Config, UnknownSectionIsRefused) {
  EXPECT_EQ(refusal("[modle]\ndepth = 3\n"),
            "job.toml:1:2: modle: unknown key; did you mean 'model'?");
}

TEST(Config, UnknownKeyFarFromAnyListsValidKeys) {
  const std::string why = refusal("[eval]\nzzzzzzzz = 1\n");
  EXPECT_NE(why.find("job.toml:2:1: eval.zzzzzzzz: unknown key; valid keys in [eval]: batch_size, "
                     "glimpses, images, modes, scales, sweep_images, upscale"),
            std::string::npos)
      << why;
}

TEST(Config, WrongTypeSaysWhatWasExpected) {
  EXPECT_EQ(refusal("[model]\ndepth = \"12\"\n"),
            "job.toml:2:9: model.depth: expected an integer in [1, 128], got a string");
  EXPECT_EQ(refusal("[logging]\nprogress = 1\n"),
            "job.toml:2:12: logging.progress: expected a boolean (true or false), got an integer");
  EXPECT_EQ(refusal("model = 3\n"),
            "job.toml:1:9: model: expected a table [model], got an integer");
}

TEST(Config, OutOfRangeValueIsRefused) {
  EXPECT_EQ(refusal("[model]\ndepth = 0\n"),
            "job.toml:2:9: model.depth: expected an integer in [1, 128], got 0");
  EXPECT_EQ(refusal("[ssl]\nmomentum_end = 1.5\n"),
            "job.toml:2:16: ssl.momentum_end: expected a number in [0, 1], got 1.5");
  // exp(1 / 0.01) overflows fp32 in Sinkhorn-Knopp (every target NaN from step 0).
  // min_lr is compared with the lr the job will use: 2e-3 x 64 / 1024 = 1.25e-4.
  EXPECT_EQ(refusal("[ssl]\nbatch_size = 64\nmin_lr = 0.001\n"),
            "job.toml:3:10: ssl.min_lr: must not exceed the peak lr (0.000125 = ssl.lr scaled by "
            "ssl.lr_scaling to ssl.batch_size), got 0.001");
  EXPECT_EQ(refusal("[ssl]\nteacher_temp_start = 0.01\n"),
            "job.toml:2:22: ssl.teacher_temp_start: expected a number in [0.012, 10], got 0.01");
}

TEST(Config, CudaGraphsUnderAutocastAreRefused) {
  EXPECT_EQ(refusal("[ssl]\nprecision = \"bf16\"\ncuda_graphs = true\n"),
            "job.toml:3:15: ssl.cuda_graphs: needs ssl.precision = \"fp32\" or \"bf16-params\" "
            "(autocast's cache of cast weights cannot live in a CUDA graph), got ssl.precision = "
            "\"bf16\"");
  EXPECT_TRUE(parse_config("[ssl]\nprecision = \"bf16-params\"\ncuda_graphs = true\n", "job.toml")
                  .ssl.cuda_graphs);
}

TEST(Config, TheFusedMlpNeedsTheTanhGelu) {
  EXPECT_EQ(refusal("[ssl]\nfused_mlp = true\n"),
            "job.toml:2:13: ssl.fused_mlp: needs model.gelu = \"tanh\" (the GELU cuBLASLt's "
            "epilogues compute), got model.gelu = \"erf\"");
  EXPECT_EQ(refusal("[model]\ngelu = \"relu\"\n"),
            "job.toml:2:8: model.gelu: expected one of \"erf\", \"tanh\", got \"relu\"");
  const JobConfig c =
      parse_config("[model]\ngelu = \"tanh\"\n[ssl]\nfused_mlp = true\n", "job.toml");
  EXPECT_TRUE(c.ssl.fused_mlp);
  EXPECT_EQ(c.model.gelu, "tanh");
}

TEST(Config, IntegersAreAcceptedAsNumbers) {
  EXPECT_DOUBLE_EQ(parse_config("[ssl]\nclip_grad = 3\n", "job.toml").ssl.clip_grad, 3.0);
}

TEST(Config, ChoiceOutsideItsOptionsIsRefused) {
  EXPECT_EQ(
      refusal("[ssl]\nprecision = \"fp8\"\n"),
      "job.toml:2:13: ssl.precision: expected one of \"fp32\", \"bf16\", \"bf16-params\", got "
      "\"fp8\"");
}

TEST(Config, BadArrayElementIsNamedByIndex) {
  const std::string bad_c = refusal("[probe]\ncs = [0.1, \"x\"]\n");
  EXPECT_EQ(
      bad_c.rfind("job.toml:2:12: probe.cs[1]: expected a non-empty array of numbers in [", 0), 0u)
      << bad_c;
  EXPECT_NE(bad_c.find("], got a string"), std::string::npos) << bad_c;
  EXPECT_NE(refusal("[eval]\nmodes = [\"vit\", \"vit\"]\n")
                .find("eval.modes[1]: expected an array of distinct"),
            std::string::npos);
}

// eval.scales = [] turns the sweep off (its doc says so); a probe needs its Cs.
TEST(Config, OnlyArraysThatMayBeEmptyAcceptEmpty) {
  EXPECT_TRUE(parse_config("[eval]\nscales = []\n", "job.toml").eval.scales.empty());
  EXPECT_EQ(refusal("[probe]\ncs = []\n"),
            "job.toml:2:6: probe.cs: expected a non-empty array of numbers in [1e-09, "
            "1000000000], got an array");
}

TEST(Config, NodeTablesAreValidatedOneByOne) {
  const std::string toml =
      "[[cluster.nodes]]\nname = \"a\"\nlearners = 1\n"
      "[[cluster.nodes]]\nname = \"b\"\ngpu = 2\n";
  EXPECT_EQ(refusal(toml), "job.toml:6:1: cluster.nodes[1].gpu: unknown key; did you mean 'gpus'?");
  const JobConfig c = parse_config(
      "[[cluster.nodes]]\nname = \"a\"\n[[cluster.nodes]]\nname = \"b\"\nhost = \"h\"\n",
      "job.toml");
  ASSERT_EQ(c.cluster.nodes.size(), 2u);
  EXPECT_EQ(c.cluster.nodes[1].host, "h");
  EXPECT_EQ(c.cluster.nodes[1].learners, 1);  // a node table's defaults apply per table
}

TEST(Config, CrossKeyChecks) {
  EXPECT_EQ(refusal("[model]\nheads = 5\n"),
            "job.toml:2:9: model.heads: must divide model.width (384), got 5");
  EXPECT_EQ(refusal("[policy]\nwidth = 64\nheads = 3\n"),
            "job.toml:3:9: policy.heads: must divide policy.width (64), got 3");
  EXPECT_EQ(refusal("[[cluster.nodes]]\nname = \"a\"\n[[cluster.nodes]]\nname = \"a\"\n"),
            "job.toml:4:8: cluster.nodes[1].name: duplicate node name \"a\"");
  EXPECT_EQ(refusal("[data]\nchannels = 1\n"),
            "job.toml: data.pixel_mean: expected 1 value or data.channels (1) values, got 3\n"
            "job.toml: data.pixel_std: expected 1 value or data.channels (1) values, got 3");
  EXPECT_NE(refusal("[data]\ndataset = \"shards\"\n")
                .find("data.shards: dataset = \"shards\" needs data.shards"),
            std::string::npos);
  EXPECT_EQ(refusal("[data]\ndataset = \"shards\"\nshards = \"/data/train\"\n"), "");
  EXPECT_EQ(
      refusal("[cluster]\nmetrics_port = 7100\n"),
      "job.toml:2:16: cluster.metrics_port: port 7100 is already used by cluster.coordinator_port");
  // Unused (no store port is opened): accepted, and it collides with nothing.
  EXPECT_EQ(refusal("[cluster]\nstore_port = 7100\n"), "");
  EXPECT_EQ(refusal("[[cluster.nodes]]\nlearners = 0\n"),
            "job.toml:1:1: cluster.nodes: every stage needs at least one learner over all nodes, "
            "got 0");
  EXPECT_EQ(refusal("[model]\nwidth = 64\nheads = 4\n[policy]\nsees_state = false\nsteps = 65\n"),
            "job.toml:6:9: policy.steps: a state-blind policy (policy.sees_state = false) codes "
            "the glimpse in model.width (64) values: expected at most that many steps, got 65");
  // The fixed-path baseline is state-blind too, so it bounds the steps whatever sees_state says.
  EXPECT_EQ(refusal("[model]\nwidth = 64\nheads = 4\n[policy]\nsteps = 65\n"),
            "job.toml:5:9: policy.steps: a state-blind policy (policy.fixed_path_baseline) codes "
            "the glimpse in model.width (64) values: expected at most that many steps, got 65");
  EXPECT_NO_THROW(parse_config(
      "[model]\nwidth = 64\nheads = 4\n[policy]\nsteps = 65\nfixed_path_baseline = false\n",
      "job.toml"));
  EXPECT_EQ(refusal("[[cluster.nodes]]\nname = \"a\"\ndata_actors = 1\nlearners = 2\n"),
            "job.toml:1:1: cluster.nodes: stage pretrain needs at least one data actor per "
            "learner, got 1 data actor(s) for 2 learner(s)");
  // A policy stage is learner 0 (the policy learner) fed by rollout actors, on ports of their own.
  EXPECT_EQ(refusal("[job]\nstages = [\"policy\"]\n[[cluster.nodes]]\nname = \"a\"\n"),
            "job.toml:3:1: cluster.nodes: stage policy needs at least one rollout actor, got 0");
  // Stages run in the order pretrain, probe, policy: each reads what the ones before wrote.
  EXPECT_EQ(
      refusal("[job]\nstages = [\"probe\", \"pretrain\"]\n"),
      "job.toml:2:10: job.stages: expected stages in the order pretrain, probe, policy, eval, "
      "each once; \"pretrain\" follows \"probe\"");
  EXPECT_NO_THROW(parse_config("[job]\nstages = [\"pretrain\", \"eval\"]\n", "job.toml"));
  EXPECT_EQ(refusal("[model]\nwidth = 64\nheads = 4\n[policy]\nsees_state = false\n[eval]\n"
                    "glimpses = 65\nmodes = [\"policy\"]\n"),
            "job.toml:7:12: eval.glimpses: a state-blind policy (policy.sees_state = false) "
            "codes the glimpse in model.width (64) values: expected at most that many glimpses "
            "in mode policy, got 65");
  // The learned fixed path (eval mode fixed_path, a default) is state-blind too, and
  // exists only where the policy stage trains it.
  EXPECT_EQ(refusal("[model]\nwidth = 64\nheads = 4\n[eval]\nglimpses = 65\n"),
            "job.toml:5:12: eval.glimpses: the learned fixed path (eval mode fixed_path) codes "
            "the glimpse in model.width (64) values: expected at most that many glimpses, got 65");
  const std::string evaluating =
      "[job]\nstages = [\"policy\", \"eval\"]\n[[cluster.nodes]]\nname = \"a\"\n"
      "rollout_actors = 1\n[policy]\n";
  EXPECT_EQ(refusal(evaluating + "fixed_path_baseline = false\n"),
            "job.toml: eval.modes: mode \"fixed_path\" needs the learned fixed path, which "
            "policy.fixed_path_baseline = false does not train: drop \"fixed_path\" from "
            "eval.modes");
  EXPECT_NE(refusal(evaluating + "sees_state = false\n").find("eval.modes: mode \"fixed_path\""),
            std::string::npos);
  EXPECT_NO_THROW(parse_config(
      evaluating + "fixed_path_baseline = false\n[eval]\nmodes = [\"policy\", \"random\"]\n",
      "job.toml"));
  EXPECT_NO_THROW(parse_config(evaluating, "job.toml"));
  EXPECT_NO_THROW(
      parse_config("[job]\nstages = [\"policy\"]\n[[cluster.nodes]]\nname = \"a\"\n"
                   "rollout_actors = 2\n",
                   "job.toml"));
  EXPECT_EQ(refusal("[cluster]\nrollout_port_base = 7199\n[[cluster.nodes]]\nname = \"a\"\n"
                    "data_actors = 2\nrollout_actors = 2\n"),
            "job.toml:2:21: cluster.rollout_port_base: rollout and eval actor ports [7199, 7201) "
            "overlap data ports [7200, 7202)");
  EXPECT_EQ(refusal("[cluster]\nmetrics_port = 7301\n[[cluster.nodes]]\nname = \"a\"\n"
                    "rollout_actors = 2\n"),
            "job.toml:2:16: cluster.metrics_port: port 7301 lies among the data, rollout or eval "
            "actors' ports");
  // Eval actors bind rollout_port_base + r too: the range is the larger of the two counts.
  EXPECT_EQ(refusal("[cluster]\nmetrics_port = 7302\n[[cluster.nodes]]\nname = \"a\"\n"
                    "rollout_actors = 1\neval_actors = 3\n"),
            "job.toml:2:16: cluster.metrics_port: port 7302 lies among the data, rollout or eval "
            "actors' ports");
  EXPECT_EQ(refusal("[views]\nlocal_scale_min = 0.5\n"),
            "job.toml:2:19: views.local_scale_min: must not exceed views.local_scale_max (0.32), "
            "got 0.5");
}

TEST(Config, EveryProblemIsReportedAtOnce) {
  try {
    parse_config("[model]\ndepth = 0\nwidth = \"wide\"\n[nope]\n", "job.toml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems().size(), 3u) << e.what();
  }
}

TEST(Config, SyntaxErrorNamesThePosition) {
  const std::string why = refusal("[model\ndepth = 3\n");
  EXPECT_EQ(why.rfind("job.toml:1:", 0), 0u) << why;
  EXPECT_NE(why.find("TOML syntax error"), std::string::npos) << why;
}

TEST(Config, MissingFileIsNamed) {
  try {
    load_config("/nonexistent/job.toml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/job.toml: cannot open the config file");
  }
}

TEST(Config, ShowRoundTrips) {
  for (const char* name : {"tiny.toml", "vit-s-imagenet.toml"}) {
    const JobConfig c = load_config(testing::source_path(std::string("configs/") + name));
    const std::string shown = to_toml(c);
    const JobConfig again = parse_config(shown, "shown.toml");
    EXPECT_EQ(to_toml(again), shown) << name;
    EXPECT_EQ(again.model.width, c.model.width);
    EXPECT_EQ(again.data.pixel_mean, c.data.pixel_mean);
    EXPECT_EQ(again.cluster.nodes.size(), c.cluster.nodes.size());
  }
  // Doubles survive exactly.
  const JobConfig c = parse_config("[ssl]\nlr = 0.0001234567890123\n", "job.toml");
  EXPECT_EQ(parse_config(to_toml(c), "shown.toml").ssl.lr, c.ssl.lr);
}

// Writes `files` (path relative to a fresh folder -> text) and returns the folder.
std::filesystem::path write_files(const std::vector<std::pair<std::string, std::string>>& files) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("config_include_" +
       std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  std::filesystem::remove_all(dir);
  for (const auto& [name, text] : files) {
    std::filesystem::create_directories((dir / name).parent_path());
    std::ofstream(dir / name) << text;
  }
  return dir;
}

std::string load_refusal(const std::filesystem::path& file) {
  try {
    load_config(file);
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST(Config, IncludeMergesTablesKeyByKeyAndReplacesArrays) {
  const auto dir = write_files({
      {"bases/base.toml",
       "[job]\nname = \"base\"\nwork_dir = \"runs/base\"\n"
       "[model]\ndepth = 4\nwidth = 128\nheads = 4\n"
       "[views]\nfovea_grid = 3\n"
       "[[cluster.nodes]]\nname = \"a\"\nhost = \"h1\"\nlearners = 2\ndata_actors = 2\n"
       "[[cluster.nodes]]\nname = \"b\"\nhost = \"h2\"\n"},
      {"variant.toml",
       "include = \"bases/base.toml\"\n[job]\nname = \"variant\"\n[model]\ndepth = 6\n"
       "[[cluster.nodes]]\nname = \"c\"\nhost = \"h3\"\n"},
  });
  const JobConfig c = load_config(dir / "variant.toml");
  EXPECT_EQ(c.job.name, "variant");        // overridden
  EXPECT_EQ(c.job.work_dir, "runs/base");  // the rest of [job] kept
  EXPECT_EQ(c.model.depth, 6);
  EXPECT_EQ(c.model.width, 128);
  EXPECT_EQ(c.model.heads, 4);
  EXPECT_EQ(c.views.fovea_grid, 3);       // a section the variant does not name
  ASSERT_EQ(c.cluster.nodes.size(), 1u);  // an array of tables replaces the base's whole
  EXPECT_EQ(c.cluster.nodes[0].name, "c");
  EXPECT_EQ(c.cluster.nodes[0].learners, 1);  // its own defaults, not node "a"'s
  // The merged config is what `config show` prints and a job ships: no include left.
  EXPECT_EQ(to_toml(parse_config(to_toml(c), "shown.toml")), to_toml(c));
  EXPECT_EQ(to_toml(c).find("include"), std::string::npos);
}

TEST(Config, IncludesChainRelativeToEachFile) {
  const auto dir = write_files({
      {"a/root.toml", "[model]\ndepth = 2\nwidth = 64\nheads = 2\n"},
      {"a/b/mid.toml", "include = \"../root.toml\"\n[model]\ndepth = 3\n"},
      {"top.toml", "include = \"a/b/mid.toml\"\n[model]\nwidth = 96\n"},
  });
  const JobConfig c = load_config(dir / "top.toml");
  EXPECT_EQ(c.model.depth, 3);
  EXPECT_EQ(c.model.width, 96);
  EXPECT_EQ(c.model.heads, 2);
}

TEST(Config, IncludeProblemsNameTheirFileAndLine) {
  const auto dir = write_files({
      {"base.toml", "[model]\nwidth = \"wide\"\n"},
      {"top.toml", "include = \"base.toml\"\n[model]\ndepht = 3\n"},
      {"cycle1.toml", "include = \"cycle2.toml\"\n"},
      {"cycle2.toml", "include = \"cycle1.toml\"\n"},
      {"missing.toml", "include = \"nope.toml\"\n"},
      {"number.toml", "include = 3\n"},
      {"syntax.toml", "include = \"broken.toml\"\n"},
      {"broken.toml", "[model\n"},
      {"nested.toml", "[job]\ninclude = \"base.toml\"\n"},
  });
  // Both problems at once, each at its own file's line.
  const std::string both = load_refusal(dir / "top.toml");
  EXPECT_NE(both.find((dir / "base.toml").string() + ":2:9: model.width: expected an integer"),
            std::string::npos)
      << both;
  EXPECT_NE(both.find((dir / "top.toml").string() + ":3:1: model.depht: unknown key"),
            std::string::npos)
      << both;
  const std::string cycle = load_refusal(dir / "cycle1.toml");
  EXPECT_NE(cycle.find("include: \"" + (dir / "cycle1.toml").string() + "\" includes itself"),
            std::string::npos)
      << cycle;
  EXPECT_NE(load_refusal(dir / "missing.toml")
                .find("missing.toml:1:11: include: cannot open \"" + (dir / "nope.toml").string()),
            std::string::npos);
  EXPECT_NE(load_refusal(dir / "number.toml").find("include: expected a string"),
            std::string::npos);
  const std::string syntax = load_refusal(dir / "syntax.toml");
  EXPECT_NE(syntax.find("broken.toml:1:"), std::string::npos) << syntax;
  EXPECT_NE(syntax.find("TOML syntax error (included from"), std::string::npos) << syntax;
  // Only the top level includes; elsewhere it is an unknown key.
  EXPECT_NE(load_refusal(dir / "nested.toml").find("job.include: unknown key"), std::string::npos);
}

TEST(Config, ReferenceDocIsUpToDate) {
  std::ifstream in(testing::source_path("docs/config.md"));
  ASSERT_TRUE(in) << "docs/config.md missing: run `saccade config docs > docs/config.md`";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), config_reference_markdown())
      << "docs/config.md is stale: run `saccade config docs > docs/config.md`";
}

}  // namespace
}  // namespace saccade
