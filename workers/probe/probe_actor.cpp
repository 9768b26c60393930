#include "workers/probe/probe_actor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>
#include <utility>

#include "workers/job_options/data_options.h"
#include "workers/probe/probe_job.h"
#include "workers/teacher/teacher_backbone.h"

namespace saccade::probe {
namespace {

// The report's name among the probe stage's checkpoint blobs.
constexpr const char* kProbeReportBlob = "probe.json";

class ProbeActor : public runtime::ActorBody {
 public:
  explicit ProbeActor(PretrainBackbone pretrain) : pretrain_(std::move(pretrain)) {}

  int run(runtime::ActorContext& ctx) override {
    const JobConfig& config = ctx.config();
    try {
      const std::optional<int64_t> committed = begin_single_actor_stage(ctx, "probe");
      if (!committed) return ctx.stopping() ? 0 : 1;
      if (*committed >= 0) return 0;
      const auto timeout = std::chrono::seconds(config.cluster.checkpoint_timeout_s);
      control::CheckpointQuery query;
      query.source = wire::CheckpointSource::INPUT_CHECKPOINT;
      query.blobs = {"teacher"};
      auto teacher = ctx.load_checkpoint(query, timeout);
      if (!teacher) {
        if (ctx.stopping()) return 0;
        spdlog::error("probe: {} did not arrive from the coordinator (its reason is logged above)",
                      control::describe(query));
        return 1;
      }
      spdlog::info("probe: teacher of checkpoint {} from the coordinator", teacher->step);
      ProbeRunOptions options;
      options.pretrain = pretrain_;
      int64_t units = 0;  // feature batches and linear fits done: the status's step
      options.on_progress = [&] {
        // A drain ends the probe at the next batch or fit (caught below): nothing to save.
        if (ctx.stopping()) throw std::runtime_error("stopped by a drain");
        ctx.report(++units, 0.0);
      };
      const ProbeReport report = probe_backbone(
          config, teacher::teacher_backbone_from(config, teacher->blobs.at("teacher")),
          teacher->step, options);
      fmt::print(stderr, "{}", format_probe_table(report));
      if (ctx.stopping()) return 0;
      if (!ctx.save_checkpoint(
              teacher->step,
              {{kProbeHeadFile, report.head_safetensors}, {kProbeReportBlob, report.json}},
              timeout)) {
        spdlog::error("probe: the head was not committed");
        return 1;
      }
      spdlog::info("probe done: head for checkpoint {} committed ({} + {} images)", teacher->step,
                   report.train_images, report.val_images);
      return 0;
    } catch (const std::exception& e) {
      if (ctx.stopping()) {
        spdlog::info("probe drained: {}", e.what());
        return 0;
      }
      spdlog::error("probe failed: {}", e.what());
      return 1;
    }
  }

 private:
  PretrainBackbone pretrain_;
};

}  // namespace

std::optional<int64_t> begin_single_actor_stage(runtime::ActorContext& ctx, const char* stage) {
  const JobConfig& config = ctx.config();
  const uint32_t threads = ctx.assignment().threads;
  at::set_num_threads(threads > 0 ? static_cast<int>(threads)
                                  : job_options::resolve_threads(config.ssl.threads));
  // A world of one: the rendezvous only says whether the stage committed already.
  const auto r = ctx.wait_rendezvous(0, std::chrono::seconds(config.cluster.rendezvous_timeout_s));
  if (!r) {
    if (!ctx.stopping())
      spdlog::error("{}: no rendezvous within {} s", stage, config.cluster.rendezvous_timeout_s);
    return std::nullopt;
  }
  if (r->resume_from_step >= 0)
    spdlog::info("{}: the stage committed its output for checkpoint {} already", stage,
                 r->resume_from_step);
  return r->resume_from_step >= 0 ? r->resume_from_step : -1;
}

std::unique_ptr<runtime::ActorBody> make_probe_actor(PretrainBackbone pretrain) {
  return std::make_unique<ProbeActor>(std::move(pretrain));
}

}  // namespace saccade::probe
