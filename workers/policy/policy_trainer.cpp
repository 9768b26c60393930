#include "workers/policy/policy_trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "dataloader/random.h"
#include "dataloader/sharded_sampler.h"
#include "model/backbone.h"
#include "model/policy.h"
#include "rl/grpo.h"
#include "workers/policy/rollout_source.h"
#include "workers/ssl/schedules.h"

namespace saccade::policy {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// A frozen copy of the policy (the KL reference), on the same device.
model::GazePolicy frozen_copy(model::GazePolicyImpl& policy) {
  model::GazePolicy copy(policy.options());
  {
    torch::NoGradGuard no_grad;
    const auto from = policy.named_parameters();
    for (auto& p : copy->named_parameters()) p.value().copy_(from[p.key()]);
  }
  copy->to(policy.parameters().front().device());
  for (auto& p : copy->parameters()) p.set_requires_grad(false);
  copy->eval();
  return copy;
}

std::string save_adamw(torch::optim::AdamW& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_adamw(torch::optim::AdamW& optimizer, const std::string& bytes) {
  try {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error(std::string("policy optimizer state does not load: ") +
                             e.what_without_backtrace());
  }
}

}  // namespace

std::vector<PolicyEpoch> train_policy(model::FovealBackboneImpl& backbone,
                                      const probe::TaskHead& head, model::GazePolicyImpl& policy,
                                      const data::Dataset& dataset, const data::ViewOptions& views,
                                      const PolicyTrainOptions& o,
                                      const std::function<void(const PolicyEpoch&)>& on_epoch) {
  policy.to(backbone.parameters().front().device());
  LocalRollouts local(backbone, head, dataset, views);
  return train_policy(local, policy, dataset.size(), o, on_epoch);
}

std::vector<PolicyEpoch> train_policy(RolloutSource& rollouts, model::GazePolicyImpl& policy,
                                      int64_t dataset_size, const PolicyTrainOptions& o,
                                      const std::function<void(const PolicyEpoch&)>& on_epoch,
                                      const PolicyProgress& progress) {
  check(o.epochs >= 1 && o.batch_size >= 1 && o.steps >= 1 && o.updates >= 1,
        "train_policy: epochs, batch_size, steps and updates must be >= 1");
  check(o.group >= 2, "train_policy: GRPO needs a group of >= 2 traces per image");
  check(o.max_images >= 0, "train_policy: max_images must be >= 0");
  const int64_t n = o.max_images > 0 ? std::min(o.max_images, dataset_size) : dataset_size;
  check(n >= 1, "train_policy: the dataset is empty");
  const int64_t batches = (n + o.batch_size - 1) / o.batch_size;
  const int64_t total = o.epochs * batches;
  const torch::Device device = policy.parameters().front().device();
  const int64_t start = progress.start_update;
  check(start >= 0 && start <= total,
        fmt::format("train_policy: cannot resume after {} of {} rollout batches", start, total));
  std::optional<model::GazePolicy> reference;
  if (o.kl_beta > 0) reference = frozen_copy(progress.reference ? *progress.reference : policy);
  torch::optim::AdamW optimizer(policy.parameters(),
                                torch::optim::AdamWOptions(o.lr).weight_decay(0.0));
  if (!progress.optimizer_state.empty()) load_adamw(optimizer, progress.optimizer_state);
  auto stopping = [&] { return progress.stopping && progress.stopping(); };
  auto checkpoint = [&](int64_t done) {
    if (progress.on_checkpoint) progress.on_checkpoint(done, save_adamw(optimizer));
  };
  data::ShardOptions order;
  order.dataset_size = n;
  order.seed = o.seed;
  const data::ShardedSampler sampler(order);

  std::vector<PolicyEpoch> epochs;
  int64_t update = start;
  for (int64_t epoch = start / batches; epoch < o.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int64_t> indices = sampler.permutation(epoch);
    PolicyEpoch log;
    log.epoch = epoch;
    const int64_t resume_at = epoch == start / batches ? (start % batches) * o.batch_size : 0;
    for (int64_t first = resume_at; first < n; first += o.batch_size, ++update) {
      if (stopping()) {
        checkpoint(update);
        return epochs;
      }
      const int64_t b = std::min(o.batch_size, n - first);
      RolloutBatch batch;
      batch.policy_version = o.version_base + static_cast<uint64_t>(update);
      batch.indices.assign(indices.begin() + first, indices.begin() + first + b);
      TraceOptions& trace = batch.trace;
      trace.steps = o.steps;
      trace.group = o.group;
      trace.source = GazeSource::kPolicySample;
      trace.state_blind = o.state_blind;
      trace.std = ssl::cosine_schedule(o.std_start, o.std_end, total, 0, 0.0, update);
      const uint64_t update_seed = data::mix_seed(o.seed, static_cast<uint64_t>(update));
      for (int64_t index : batch.indices)
        trace.image_seeds.push_back(data::mix_seed(update_seed, static_cast<uint64_t>(index)));
      trace.threads = o.threads;
      Traces tr;
      const auto rollout_start = std::chrono::steady_clock::now();
      try {
        tr = rollouts.run(&policy, batch);
      } catch (const std::exception&) {
        if (!stopping()) throw;
        checkpoint(update);  // the batch in flight is not trained on
        return epochs;
      }
      const auto update_start = std::chrono::steady_clock::now();
      log.rollout_seconds += std::chrono::duration<double>(update_start - rollout_start).count();

      const int64_t T = o.steps, N = b * o.group;
      const torch::Tensor advantages =
          rl::group_advantages(
              rl::discounted_returns(
                  rl::step_rewards(tr.rewards, tr.correct, o.reward).view({T, b, o.group}),
                  o.gamma))
              .view({T, N})
              .to(device);
      const torch::Tensor states =
          tr.states.view({T * N, tr.states.size(2), tr.states.size(3)}).to(device, torch::kFloat32);
      const torch::Tensor extent = tr.extent.repeat({T, 1}).to(device);
      const torch::Tensor gazes = tr.gazes.view({T * N, 2}).to(device);
      const torch::Tensor old_log_prob = tr.log_prob.to(device);
      torch::Tensor ref_log_prob;
      if (reference) {
        torch::NoGradGuard no_grad;
        ref_log_prob =
            (*reference)->distribution(states, extent, trace.std).log_prob(gazes).view({T, N});
      }
      policy.train();
      rl::GrpoLoss loss;
      for (int64_t u = 0; u < o.updates; ++u) {
        const torch::Tensor log_prob =
            policy.distribution(states, extent, trace.std).log_prob(gazes).view({T, N});
        loss =
            rl::grpo_loss(log_prob, old_log_prob, advantages, o.clip_eps, ref_log_prob, o.kl_beta);
        optimizer.zero_grad();
        loss.loss.backward();
        optimizer.step();
      }
      log.update_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - update_start).count();
      const double w = static_cast<double>(b);
      log.images += b;
      log.mean_reward += tr.rewards.mean().item<double>() * w;
      log.final_accuracy += tr.correct[T - 1].to(torch::kFloat64).mean().item<double>() * w;
      log.loss += loss.loss.item<double>() * w;
      log.clip_fraction += loss.clip_fraction.item<double>() * w;
      log.kl += loss.kl.item<double>() * w;
      log.std = trace.std;
      const int64_t done = update + 1;
      if (progress.on_batch) progress.on_batch(done, tr.rewards.mean().item<double>());
      if (progress.checkpoint_every > 0 && (done % progress.checkpoint_every == 0 || done == total))
        checkpoint(done);
    }
    const double images = static_cast<double>(log.images);
    log.mean_reward /= images;
    log.final_accuracy /= images;
    log.loss /= images;
    log.clip_fraction /= images;
    log.kl /= images;
    log.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    epochs.push_back(log);
    if (on_epoch) on_epoch(log);
  }
  return epochs;
}

GazeEvaluation evaluate_gazes(RolloutSource& rollouts, model::GazePolicyImpl* policy,
                              GazeSource source, int64_t dataset_size, const GazeEvalOptions& o) {
  check(o.steps >= 1 && o.batch_size >= 1 && o.max_images >= 0,
        "evaluate_gazes: steps and batch_size must be >= 1");
  const int64_t n = o.max_images > 0 ? std::min(o.max_images, dataset_size) : dataset_size;
  check(n >= 1, "evaluate_gazes: the dataset is empty");
  std::vector<double> correct(static_cast<size_t>(o.steps), 0.0);
  std::vector<double> entropy(static_cast<size_t>(o.steps), 0.0);
  std::vector<torch::Tensor> gazes;  // [T, b, 2] per batch
  for (int64_t first = 0; first < n; first += o.batch_size) {
    const int64_t b = std::min(o.batch_size, n - first);
    RolloutBatch batch;
    batch.policy_version = o.policy_version;
    batch.indices.resize(static_cast<size_t>(b));
    std::iota(batch.indices.begin(), batch.indices.end(), first);
    batch.scale = o.scale;
    batch.bilinear_upscale = o.bilinear_upscale;
    TraceOptions& trace = batch.trace;
    trace.steps = o.steps;
    trace.source = source;
    trace.state_blind = o.state_blind && needs_policy(source);
    for (int64_t index : batch.indices)
      trace.image_seeds.push_back(data::mix_seed(o.seed, static_cast<uint64_t>(index)));
    trace.threads = o.threads;
    const Traces tr = rollouts.run(needs_policy(source) ? policy : nullptr, batch);
    const std::vector<double> a = step_accuracy(tr);
    for (size_t t = 0; t < a.size(); ++t) correct[t] += a[t] * static_cast<double>(b);
    gazes.push_back(tr.gazes.to(torch::kFloat64));
    if (needs_policy(source)) {
      // The mixture the policy drew from, again from the states it read (the
      // traces may have run on eval actors; the policy is here).
      torch::NoGradGuard no_grad;
      const torch::Device device = policy->parameters().front().device();
      const int64_t T = o.steps, N = tr.extent.size(0);
      const torch::Tensor h =
          policy
              ->distribution(
                  tr.states.view({T * N, tr.states.size(2), tr.states.size(3)}).to(device),
                  tr.extent.repeat({T, 1}).to(device), 1.0)
              .weight_entropy()
              .view({T, N})
              .sum(1)
              .to(torch::kCPU, torch::kFloat64);
      for (int64_t t = 0; t < T; ++t) entropy[static_cast<size_t>(t)] += h[t].item<double>();
    }
    if (o.on_progress) o.on_progress();
  }
  GazeEvaluation out;
  for (double c : correct) out.accuracy.push_back(c / static_cast<double>(n));
  if (needs_policy(source))
    for (double h : entropy) out.mixture_entropy.push_back(h / static_cast<double>(n));
  const torch::Tensor all = torch::cat(gazes, 1);  // [T, n, 2]
  const torch::Tensor spread = (all - all.mean(1, /*keepdim=*/true)).square().sum(2).mean(1).sqrt();
  for (int64_t t = 0; t < spread.size(0); ++t) out.gaze_spread.push_back(spread[t].item<double>());
  return out;
}

}  // namespace saccade::policy
