#include "workers/policy/policy_actors.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "dataloader/dataset_factory.h"
#include "model/weights.h"
#include "storage/rollout_store.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/link_options.h"
#include "workers/policy/policy_stage.h"
#include "workers/policy/rollout_client.h"
#include "workers/policy/rollout_server.h"
#include "workers/policy/rollout_source.h"
#include "workers/probe/task_head.h"
#include "workers/teacher/teacher_backbone.h"

namespace saccade::policy {
namespace {

// The policy's rollout batches, in the learned fixed path's checkpoint.
constexpr const char* kPolicyBatchesBlob = "policy_batches";

void set_threads(const runtime::ActorContext& ctx) {
  const uint32_t assigned = ctx.assignment().threads;
  at::set_num_threads(assigned > 0 ? static_cast<int>(assigned)
                                   : job_options::resolve_threads(ctx.config().ssl.threads));
}

// The policy stage's inputs from the coordinator (fetch_probe_head_inputs).
PolicyStage fetch_policy_stage(const JobConfig& config, runtime::ActorContext& ctx) {
  const ProbeHeadInputs in = fetch_probe_head_inputs(ctx);
  return policy_stage_from(config, in.head_bytes, in.head_origin, in.backbone_safetensors);
}

class PolicyLearner : public runtime::ActorBody {
 public:
  int run(runtime::ActorContext& ctx) override {
    const JobConfig& config = ctx.config();
    try {
      set_threads(ctx);
      PolicyStage stage = fetch_policy_stage(config, ctx);
      model::GazePolicy policy = initial_policy(config, stage);
      model::GazePolicy reference = initial_policy(config, stage);  // the KL's, on resume too
      // A world of one: the rendezvous only says which checkpoint to resume from.
      const std::optional<runtime::RendezvousInfo> r =
          ctx.wait_rendezvous(0, std::chrono::seconds(config.cluster.rendezvous_timeout_s));
      if (!r) {
        if (ctx.stopping()) return 0;
        spdlog::error("policy learner: no rendezvous within {} s",
                      config.cluster.rendezvous_timeout_s);
        return 1;
      }
      PolicyProgress progress;
      progress.reference = reference.get();
      progress.checkpoint_every = config.policy.checkpoint_every_batches;
      progress.stopping = [&] { return ctx.stopping(); };
      const auto timeout = std::chrono::seconds(config.cluster.checkpoint_timeout_s);
      // The policy's last checkpoint (its rollout batches, AdamW state): the
      // learned fixed path's checkpoint, at the rollout batches of both (the
      // fixed path trains as many as the policy), repeats them.
      int64_t policy_batches = 0;
      std::string policy_optimizer;
      PolicyRunOptions run;
      if (r->resume_from_step >= 0) {
        control::CheckpointQuery query;
        query.step = r->resume_from_step;
        std::optional<runtime::LoadedCheckpoint> loaded = ctx.load_checkpoint(query, timeout);
        const runtime::CheckpointBlobs* blobs = loaded ? &loaded->blobs : nullptr;
        if (!blobs || !blobs->count(kPolicyFile) || !blobs->count("optimizer")) {
          if (ctx.stopping()) return 0;
          spdlog::error("policy learner: checkpoint {} did not arrive whole", r->resume_from_step);
          return 1;
        }
        model::load_modules({{"", policy.get()}}, blobs->at(kPolicyFile));
        progress.optimizer_state = blobs->at("optimizer");
        progress.start_update = r->resume_from_step;
        if (blobs->count(kFixedPathFile) && blobs->count(kPolicyBatchesBlob)) {
          run.fixed_path_weights = blobs->at(kFixedPathFile);  // both trained: evaluate again
          progress.start_update = std::stoll(blobs->at(kPolicyBatchesBlob));
        }
        policy_batches = progress.start_update;
        policy_optimizer = progress.optimizer_state;
        spdlog::info("policy learner resumes after {} rollout batches{}", progress.start_update,
                     run.fixed_path_weights.empty() ? "" : " and the learned fixed path");
      }
      progress.on_checkpoint = [&](int64_t done, const std::string& optimizer) {
        const bool ok = ctx.save_checkpoint(
            done,
            {{kPolicyFile, model::save_modules({{"", policy.get()}})}, {"optimizer", optimizer}},
            timeout);
        if (!ok) spdlog::warn("policy learner: checkpoint {} was not committed", done);
        policy_batches = done;
        policy_optimizer = optimizer;
      };
      // The eval stage reads the fixed path from the stage's last checkpoint.
      run.on_fixed_path = [&](const std::string& weights) {
        const int64_t step = 2 * policy_batches;
        const bool ok =
            ctx.save_checkpoint(step,
                                {{kPolicyFile, model::save_modules({{"", policy.get()}})},
                                 {"optimizer", policy_optimizer},
                                 {kFixedPathFile, weights},
                                 {kPolicyBatchesBlob, std::to_string(policy_batches)}},
                                timeout);
        if (!ok) spdlog::warn("policy learner: checkpoint {} (fixed path) was not committed", step);
      };
      const RolloutClientOptions o = rollout_client_options(ctx, stage.backbone->options());
      RolloutClient client(o);
      const std::string db = (std::filesystem::path(config.job.work_dir) / "rollouts.db").string();
      auto store = storage::RolloutStore::open(db, config.policy.keep_rollout_batches);
      RecordedRollouts recorded(client, *store);
      spdlog::info("policy learner: {} rollout actor(s), rollouts kept in {}", o.endpoints.size(),
                   db);
      const PolicyReport report = train_and_evaluate_policy(
          config, stage, *policy, recorded, run,
          [&](const PolicyEpoch& e) {
            ctx.report(e.epoch + 1, static_cast<double>(e.images) / std::max(e.seconds, 1e-9),
                       {{"loss", e.loss},
                        {"reward", e.mean_reward},
                        {"rollout_s", e.rollout_seconds},
                        {"update_s", e.update_seconds}});
          },
          progress);
      if (report.stopped) {
        spdlog::info("policy learner drained");
        return 0;
      }
      spdlog::info("policy learner done: {} parts re-sent, {} frames dropped; {}", client.resent(),
                   client.dropped(), report.policy_path);
      return 0;
    } catch (const std::exception& e) {
      if (ctx.stopping()) {
        spdlog::info("policy learner drained: {}", e.what());
        return 0;
      }
      spdlog::error("policy learner failed: {}", e.what());
      return 1;
    }
  }
};

// A rollout actor (policy stage: the training split) or an eval actor (eval
// stage: the validation split): the same server of glimpse traces.
class RolloutActor : public runtime::ActorBody {
 public:
  explicit RolloutActor(bool validation) : validation_(validation) {}

  int run(runtime::ActorContext& ctx) override {
    const JobConfig& config = ctx.config();
    const char* what = validation_ ? "eval actor" : "rollout actor";
    try {
      set_threads(ctx);
      PolicyStage stage = fetch_policy_stage(config, ctx);
      const auto dataset = data::make_dataset(job_options::dataset_spec(config, validation_));
      RolloutServerOptions o;
      static_cast<runtime::RequestServerOptions&>(o) =
          job_options::request_server_options(config, ctx.assignment());
      o.threads = static_cast<int>(config.data.loader_threads);
      RolloutServer server(*stage.backbone, stage.head, stage.policy_options, dataset,
                           job_options::view_options(config), o);
      runtime::RateReporter rate(ctx);  // requests served, traces/s
      server.serve([&] {
        rate.tick(static_cast<int64_t>(server.requests_served()), server.traces_served());
        return ctx.stopping();
      });
      spdlog::info("{} stops: {} requests, {} traces served, {} frames dropped", what,
                   server.requests_served(), server.traces_served(), server.dropped());
      return 0;
    } catch (const std::exception& e) {
      spdlog::error("{} failed: {}", what, e.what());
      return 1;
    }
  }

 private:
  const bool validation_;  // which split the request's image ids name
};

}  // namespace

std::string fetch_input_blob(runtime::ActorContext& ctx, const control::CheckpointQuery& query,
                             const std::string& blob) {
  auto loaded =
      ctx.load_checkpoint(query, std::chrono::seconds(ctx.config().cluster.checkpoint_timeout_s));
  if (!loaded || !loaded->blobs.count(blob))
    throw std::runtime_error(
        fmt::format("{} did not arrive from the coordinator{}", control::describe(query),
                    ctx.stopping() ? " (stopping)" : " (its reason, if any, is logged above)"));
  return std::move(loaded->blobs.at(blob));
}

ProbeHeadInputs fetch_probe_head_inputs(runtime::ActorContext& ctx) {
  ProbeHeadInputs in;
  control::CheckpointQuery head;
  head.source = wire::CheckpointSource::INPUT_FILE;
  head.blobs = {probe::kProbeHeadFile};
  in.head_bytes = fetch_input_blob(ctx, head, probe::kProbeHeadFile);
  in.head_origin = fmt::format("{} from the coordinator", probe::kProbeHeadFile);
  control::CheckpointQuery teacher;
  teacher.source = wire::CheckpointSource::INPUT_CHECKPOINT;
  const probe::ProbeHeads heads = probe::parse_probe_heads(in.head_bytes, in.head_origin);
  if (!heads.backbone_file.empty())
    throw std::runtime_error(fmt::format(
        "{} was fitted on the backbone file {}, not on a checkpoint a job's actors can fetch: "
        "run the one-process `saccade policy CONFIG` / `saccade eval CONFIG` on it",
        in.head_origin, heads.backbone_file));
  teacher.step = heads.checkpoint_step;
  teacher.blobs = {"teacher"};
  in.backbone_safetensors =
      teacher::teacher_backbone_from(ctx.config(), fetch_input_blob(ctx, teacher, "teacher"));
  return in;
}

RolloutClientOptions rollout_client_options(runtime::ActorContext& ctx,
                                            const model::BackboneOptions& backbone) {
  const JobConfig& config = ctx.config();
  RolloutClientOptions o;
  o.endpoints = ctx.assignment().peers;
  o.n_state = backbone.n_state;
  o.width = backbone.width;
  o.request_timeout = std::chrono::milliseconds(config.policy.rollout_timeout_ms);
  job_options::PeerLink link =
      job_options::peer_link(config, ctx.assignment(), /*as_server=*/false);
  o.security = std::move(link.security);
  o.sender = std::move(link.sender);
  o.expect = std::move(link.expect);
  o.stopping = [&ctx] { return ctx.stopping(); };
  return o;
}

std::unique_ptr<runtime::ActorBody> make_policy_learner() {
  return std::make_unique<PolicyLearner>();
}

std::unique_ptr<runtime::ActorBody> make_rollout_actor() {
  return std::make_unique<RolloutActor>(/*validation=*/false);
}

std::unique_ptr<runtime::ActorBody> make_eval_actor() {
  return std::make_unique<RolloutActor>(/*validation=*/true);
}

}  // namespace saccade::policy
