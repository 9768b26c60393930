#include "workers/learner/learner_actor.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <mutex>
#include <optional>

#include "common/seconds_since.h"
#include "control/control.h"
#include "workers/data_plane/batch_client.h"
#include "workers/job_options/data_options.h"
#include "workers/job_options/model_options.h"
#include "workers/job_options/pretrain_options.h"
#include "workers/job_options/remote_batch_options.h"
#include "workers/learner/learner_group.h"
#include "workers/pretrain/knn_monitor.h"
#include "workers/pretrain/ssl_trainer.h"
#include "workers/pretrain/training_loop.h"

namespace saccade::learner {
namespace {

using runtime::ActorContext;
using runtime::RendezvousInfo;
using Clock = std::chrono::steady_clock;

// The sampler position after `step` optimiser steps of `batch` images: every
// rank draws the same number of entries per step, so the step is the position.
data::DataPosition position_at(int64_t step, int64_t batch, int64_t samples_per_epoch) {
  const int64_t drawn = step * batch;
  return {drawn / samples_per_epoch, drawn % samples_per_epoch};
}

std::string node_host(const JobConfig& config, const std::string& node) {
  for (const auto& n : config.cluster.nodes)
    if (n.name == node) return n.host;
  return "127.0.0.1";
}

class LearnerActor final : public runtime::ActorBody {
 public:
  int run(ActorContext& ctx) override {
    try {
      return train(ctx);
    } catch (const std::exception& e) {
      spdlog::error("learner {}: {}", ctx.assignment().rank, e.what());
      return kLearnerFailed;
    }
  }

  // Drain (SIGTERM, preemption): learner 0 commits where it stands. Also called
  // by the runtime's bounded drain while a step runs: SslTrainer::save() then
  // gives the last completed step.
  void checkpoint(ActorContext& ctx) override {
    if (ctx.assignment().rank != 0) return;
    std::lock_guard lock(save_mutex_);
    if (trainer_ && trainer_->step() != saved_step_) save(ctx);
  }
  bool checkpoint_while_running() const override { return true; }

 private:
  int train(ActorContext& ctx) {
    const JobConfig& config = ctx.config();
    const control::Assignment& me = ctx.assignment();
    const int threads = me.threads > 0 ? static_cast<int>(me.threads)
                                       : job_options::resolve_threads(config.ssl.threads);
    at::set_num_threads(threads);
    const auto dataset =
        data::make_dataset(job_options::dataset_spec(config, /*validation=*/false));
    const int world = static_cast<int>(config.cluster.total(&NodeSpec::learners));
    const int64_t per_epoch = job_options::steps_per_epoch(config, dataset->size());
    const int64_t total = config.ssl.epochs * per_epoch;
    batch_ = job_options::per_rank_batch(config, world);
    spdlog::info("learner {} of {} on {} ({} threads): {} steps of {} images, {} data actor(s)",
                 me.rank, world, me.device, threads, total, batch_, me.peers.size());

    // Learner 0 measures k-NN: every learner holds the same teacher.
    const std::unique_ptr<pretrain::KnnMonitor> knn =
        me.rank == 0 ? pretrain::KnnMonitor::open(job_options::knn_monitor_options(config))
                     : nullptr;
    uint64_t generation = 0;
    while (!ctx.stopping()) {
      const auto r = ctx.wait_rendezvous(generation,
                                         std::chrono::seconds(config.cluster.rendezvous_timeout_s));
      if (!r) {
        if (ctx.stopping()) return 0;
        spdlog::error("no rendezvous within {} s (cluster.rendezvous_timeout_s)",
                      config.cluster.rendezvous_timeout_s);
        return kLearnerNoRendezvous;
      }
      generation = r->generation;
      if (!join(ctx, *r, per_epoch)) return ctx.stopping() ? 0 : kLearnerNoCheckpoint;

      const data::ShardOptions shard =
          job_options::shard_options(config, dataset->size(), world, me.rank);
      const data::ShardedSampler sampler(shard);
      data_plane::RemoteBatchSource source(
          job_options::batch_source_options(config, me, shard, batch_),
          position_at(trainer_->step(), batch_, sampler.num_samples()));
      pretrain::TrainingLoopHooks hooks;
      bool new_generation = false;
      hooks.keep_going = [&] {
        if (ctx.stopping()) return false;
        const auto now = ctx.rendezvous();
        new_generation = now && now->generation != generation;
        return !new_generation;
      };
      hooks.next_batch = [&] { return source.next([&] { return ctx.stopping(); }); };
      hooks.busy = [&] { ctx.touch(); };  // a k-NN check takes seconds: not a hang
      hooks.report = [&](int64_t step, const pretrain::StepStats*,
                         const pretrain::StepMetrics& metrics, const std::string&) {
        double per_second = 0;
        for (const auto& [name, v] : metrics)
          if (name == "images_per_second") per_second = v;
        ctx.report(step, per_second, metrics);
      };
      if (me.rank == 0)
        hooks.checkpoint = [&](const data::DataPosition&) {
          std::lock_guard lock(save_mutex_);
          save(ctx);
        };
      try {
        pretrain::run_training_loop(*trainer_, {total, config.ssl.checkpoint_every_steps, batch_},
                                    knn.get(), hooks);
      } catch (const std::exception& e) {
        // A peer is gone or hung: the coordinator starts a new generation.
        if (ctx.stopping()) return 0;
        spdlog::warn("step {} failed in generation {}: {}; waiting for the next rendezvous",
                     trainer_->step(), generation, e.what());
        continue;
      }
      if (ctx.stopping()) return 0;
      if (new_generation) continue;
      if (trainer_->step() >= total) {
        spdlog::info("learner {}: step budget {} reached", me.rank, total);
        return 0;
      }
    }
    return 0;
  }

  // Joins the generation of `r` and restores the trainer: from the committed
  // checkpoint it names, or fresh (same seed on every rank: same weights).
  bool join(ActorContext& ctx, const RendezvousInfo& r, int64_t per_epoch) {
    const JobConfig& config = ctx.config();
    const control::Assignment& me = ctx.assignment();
    group_.reset();
    {
      std::lock_guard lock(save_mutex_);
      trainer_.reset();
    }
    const std::chrono::milliseconds timeout(r.collective_timeout_ms);
    LearnerGroupOptions o;
    // The generation's keys live in the coordinator and travel over this actor's
    // (CURVE-protected) link: no learner serves a store port.
    const uint64_t generation = r.generation;
    o.store = [&ctx, generation](const control::StoreQuery& q) {
      return ctx.rendezvous_store(generation, q);
    };
    o.rank = r.rank;
    o.world_size = r.world_size;
    o.generation = r.generation;
    o.timeout = timeout;
    o.device = me.device;
    o.local_host = node_host(config, me.node);
    ctx.touch();
    group_ = LearnerGroup::join(o, nullptr);
    spdlog::info("generation {}: joined {} learners over {}", r.generation, r.world_size,
                 group_->backend());
    LearnerGroup* group = group_.get();
    // Published to checkpoint() only once restored: a drain must never commit a
    // fresh trainer over the job's progress.
    ssl::Collectives collectives;
    collectives.world_size = r.world_size;
    collectives.sum = [group](at::Tensor& t) { group->all_reduce_sum(t); };
    collectives.start_sum = [group](at::Tensor& t) { return group->start_all_reduce_sum(t); };
    auto trainer = std::make_unique<pretrain::SslTrainer>(
        job_options::trainer_options(config, per_epoch, me.device), collectives);
    int64_t saved_step = -1;
    if (r.resume_from_step >= 0) {
      control::CheckpointQuery query;
      query.step = r.resume_from_step;
      auto blobs =
          ctx.load_checkpoint(query, std::chrono::seconds(config.cluster.checkpoint_timeout_s));
      if (!blobs) {
        spdlog::error("checkpoint {} did not arrive from the coordinator", r.resume_from_step);
        return false;
      }
      trainer->load(blobs->blobs);
      saved_step = trainer->step();
      spdlog::info("resumed from checkpoint {}", trainer->step());
    }
    std::lock_guard lock(save_mutex_);
    trainer_ = std::move(trainer);
    saved_step_ = saved_step;
    return true;
  }

  // save_mutex_ held.
  void save(ActorContext& ctx) {
    const int64_t step = trainer_->step();
    const auto t0 = Clock::now();
    const bool ok = ctx.save_checkpoint(
        step, trainer_->save(), std::chrono::seconds(ctx.config().cluster.checkpoint_timeout_s));
    if (ok) {
      saved_step_ = step;
      spdlog::info("checkpoint {} committed by the coordinator in {:.2f} s", step,
                   seconds_since(t0));
    }
  }

  std::unique_ptr<LearnerGroup> group_;  // this generation's process group
  // Written by the body's thread only, under save_mutex_; checkpoint() may read
  // them from the runtime's bounded-drain thread.
  std::mutex save_mutex_;
  std::unique_ptr<pretrain::SslTrainer> trainer_;  // student, teacher, optimiser of this generation
  int64_t saved_step_ = -1;                        // last step committed (learner 0)
  int64_t batch_ = 0;
};

}  // namespace

std::unique_ptr<runtime::ActorBody> make_learner_actor() {
  return std::make_unique<LearnerActor>();
}

}  // namespace saccade::learner
