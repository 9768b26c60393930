#include "workers/eval/eval_actor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "control/placement.h"
#include "workers/eval/eval_job.h"
#include "workers/job_options/model_options.h"
#include "workers/policy/policy_actors.h"
#include "workers/policy/policy_job.h"
#include "workers/policy/policy_stage.h"
#include "workers/policy/rollout_client.h"
#include "workers/probe/probe_actor.h"

namespace saccade::eval {
namespace {

class EvalLeader : public runtime::ActorBody {
 public:
  int run(runtime::ActorContext& ctx) override {
    const JobConfig& config = ctx.config();
    try {
      const std::optional<int64_t> committed = probe::begin_single_actor_stage(ctx, "eval");
      if (!committed) return ctx.stopping() ? 0 : 1;
      if (*committed >= 0) return 0;
      const EvalInputs inputs = fetch_inputs(ctx);
      EvalRunOptions options;
      // The gaze modes' traces go to the eval actors (the assignment's peers), if any.
      std::unique_ptr<policy::RolloutClient> eval_actors;
      if (!ctx.assignment().peers.empty()) {
        eval_actors = std::make_unique<policy::RolloutClient>(
            policy::rollout_client_options(ctx, job_options::backbone_options(ctx.config())));
        options.rollouts = eval_actors.get();
      }
      spdlog::info("eval: glimpse traces on {}",
                   eval_actors ? fmt::format("{} eval actor(s)", ctx.assignment().peers.size())
                               : std::string("this actor (no eval actors)"));
      int64_t units = 0;  // batches evaluated: the status's step
      options.on_progress = [&] {
        // A drain ends the evaluation at the next batch (caught below): nothing to save.
        if (ctx.stopping()) throw std::runtime_error("stopped by a drain");
        ctx.report(++units, 0.0);
      };
      const EvalReport report = evaluate_models(config, inputs, options);
      fmt::print(stderr, "{}", format_eval_table(report));
      if (ctx.stopping()) return 0;
      const auto timeout = std::chrono::seconds(config.cluster.checkpoint_timeout_s);
      if (!ctx.save_checkpoint(report.checkpoint_step, {{kEvalReportFile, report.json}}, timeout)) {
        spdlog::error("eval: the report was not committed");
        return 1;
      }
      spdlog::info("eval done: report for checkpoint {} committed ({} images, {} in the sweep)",
                   report.checkpoint_step, report.images, report.sweep_images);
      if (eval_actors)
        spdlog::info("eval: {} parts re-sent, {} frames dropped", eval_actors->resent(),
                     eval_actors->dropped());
      return 0;
    } catch (const EvalInputError& e) {
      spdlog::error("eval cannot run with these inputs: {}", e.what());
      return control::kExitInputRefused;
    } catch (const std::exception& e) {
      if (ctx.stopping()) {
        spdlog::info("eval drained: {}", e.what());
        return 0;
      }
      spdlog::error("eval failed: {}", e.what());
      return 1;
    }
  }

 private:
  // The inputs from the coordinator, never from this node's file system: the
  // probe's heads, the teacher of the checkpoint they name, the policy and the
  // learned fixed path.
  static EvalInputs fetch_inputs(runtime::ActorContext& ctx) {
    EvalInputs in;
    in.probe = policy::fetch_probe_head_inputs(ctx);
    const auto& modes = ctx.config().eval.modes;
    // A policy stage's weights for `mode`, as the coordinator serves its file.
    auto fetch_weights = [&](const char* mode, const char* file, std::string& bytes,
                             std::string& origin) {
      if (std::find(modes.begin(), modes.end(), mode) == modes.end()) return;
      control::CheckpointQuery query;
      query.source = wire::CheckpointSource::INPUT_FILE;
      query.blobs = {file};
      bytes = policy::fetch_input_blob(ctx, query, file);
      origin = fmt::format("{} from the coordinator", file);
    };
    fetch_weights("policy", policy::kPolicyFile, in.policy_bytes, in.policy_origin);
    fetch_weights("fixed_path", policy::kFixedPathFile, in.fixed_path_bytes, in.fixed_path_origin);
    spdlog::info("eval: heads, teacher{}{} from the coordinator",
                 in.policy_bytes.empty() ? "" : ", policy",
                 in.fixed_path_bytes.empty() ? "" : ", learned fixed path");
    return in;
  }
};

}  // namespace

std::unique_ptr<runtime::ActorBody> make_eval_leader() {
  return std::make_unique<EvalLeader>();
}

}  // namespace saccade::eval
