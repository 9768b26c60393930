#include "workers/job_options/model_options.h"

#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "common/device_peak.h"

namespace saccade::job_options {
namespace {

rl::RewardKind reward_kind(const std::string& name) {
  if (name == "increase") return rl::RewardKind::kIncrease;
  if (name == "final_correct") return rl::RewardKind::kFinalCorrect;
  if (name == "probability") return rl::RewardKind::kProbability;
  throw std::invalid_argument(fmt::format(
      "policy.reward: expected probability, increase or final_correct, got \"{}\"", name));
}

}  // namespace

model::BackboneOptions backbone_options(const JobConfig& config) {
  const ModelConfig& m = config.model;
  model::BackboneOptions o;
  o.patch_size = m.patch_size;
  o.channels = config.data.channels;
  o.depth = m.depth;
  o.width = m.width;
  o.heads = m.heads;
  o.mlp_ratio = m.mlp_ratio;
  o.n_state = m.n_state;
  o.pos_mlp_hidden = m.pos_mlp_hidden;
  o.layerscale_init = m.layerscale_init;
  o.state_input = model::parse_state_input(m.state_input);
  o.gelu = model::parse_gelu(m.gelu);
  return o;
}

model::DinoHeadOptions dino_head_options(const JobConfig& config) {
  model::DinoHeadOptions o;
  o.in_dim = config.model.width;
  o.hidden_dim = config.ssl.head_hidden;
  o.bottleneck_dim = config.ssl.head_bottleneck;
  o.n_prototypes = config.ssl.head_prototypes;
  return o;
}

ssl::ScheduleOptions schedule_options(const SslConfig& config, int64_t steps_per_epoch) {
  if (steps_per_epoch < 1)
    throw std::invalid_argument("steps_per_epoch must be >= 1, got " +
                                std::to_string(steps_per_epoch));
  ssl::ScheduleOptions o;
  o.steps_per_epoch = steps_per_epoch;
  o.schedule_epochs = config.schedule_epochs > 0 ? config.schedule_epochs : config.epochs;
  o.lr = effective_lr(config);
  o.min_lr = config.min_lr;
  o.warmup_epochs = config.warmup_epochs;
  o.weight_decay_start = config.weight_decay_start;
  o.weight_decay_end = config.weight_decay_end;
  o.momentum_start = config.momentum_start;
  o.momentum_end = config.momentum_end;
  o.teacher_temp_start = config.teacher_temp_start;
  o.teacher_temp_end = config.teacher_temp_end;
  o.teacher_temp_warmup_epochs = config.teacher_temp_warmup_epochs;
  o.freeze_last_layer_epochs = config.freeze_last_layer_epochs;
  return o;
}

ssl::TrainerOptions trainer_options(const JobConfig& c, int64_t steps_per_epoch,
                                    const std::string& device) {
  ssl::TrainerOptions o;
  o.backbone = backbone_options(c);
  o.head = dino_head_options(c);
  o.schedule = schedule_options(c.ssl, steps_per_epoch);
  o.student_temp = c.ssl.student_temp;
  o.koleo_weight = c.ssl.koleo_weight;
  o.global_weight = c.ssl.global_weight;
  o.sequential_weight = c.ssl.sequential_weight;
  o.sequential_targets_global = c.ssl.sequential_targets == "global";
  o.sinkhorn_iterations = c.ssl.sinkhorn_iterations;
  o.ema_centering = c.ssl.teacher_centering == "ema";
  o.center_momentum = c.ssl.center_momentum;
  o.clip_grad = c.ssl.clip_grad;
  o.device = device;
  o.precision = c.ssl.precision == "bf16"          ? ssl::Precision::kBf16Autocast
                : c.ssl.precision == "bf16-params" ? ssl::Precision::kBf16Params
                                                   : ssl::Precision::kFp32;
  o.overlap_all_reduce = c.ssl.overlap_all_reduce;
  o.batched_glimpses = c.ssl.batched_glimpses;
  o.cuda_graphs = c.ssl.cuda_graphs;
  o.prefetch_to_device = c.ssl.prefetch_to_device;
  o.fused_add_norm = c.ssl.fused_add_norm;
  o.fused_mlp = c.ssl.fused_mlp;
  o.fused_bias_grad = c.ssl.fused_bias_grad;
  o.seed = static_cast<uint64_t>(c.job.seed);
  o.supervised = c.ssl.objective == "supervised";
  o.peak_tflops = resolve_peak_tflops(c.ssl.peak_tflops, device, c.ssl.precision);
  for (int64_t ch = 0; ch < o.backbone.channels; ++ch) {  // one config value may stand for all
    const auto at = [&](const std::vector<double>& v) {
      return static_cast<float>(v[v.size() == 1 ? 0 : static_cast<size_t>(ch)]);
    };
    o.pixel_mean.push_back(at(c.data.pixel_mean));
    o.pixel_std.push_back(at(c.data.pixel_std));
  }
  return o;
}

model::PolicyOptions policy_options_for(const JobConfig& config,
                                        const model::BackboneOptions& backbone) {
  model::PolicyOptions po;
  po.in_dim = backbone.width;
  po.n_state = backbone.n_state;
  po.depth = config.policy.blocks;
  po.width = config.policy.width;
  po.heads = config.policy.heads;
  po.n_mix = config.policy.mixtures;
  po.validate();
  return po;
}

policy::PolicyTrainOptions policy_train_options(const JobConfig& config, int64_t max_train_images) {
  policy::PolicyTrainOptions train;
  train.epochs = config.policy.epochs;
  train.batch_size = config.policy.batch_size;
  train.group = config.policy.group_size;
  train.steps = config.policy.steps;
  train.updates = config.policy.updates;
  train.gamma = config.policy.gamma;
  train.reward = reward_kind(config.policy.reward);
  train.clip_eps = config.policy.clip_eps;
  train.kl_beta = config.policy.kl_beta;
  train.lr = config.policy.lr;
  train.std_start = config.policy.std_start;
  train.std_end = config.policy.std_end;
  train.max_images = max_train_images;
  train.threads = static_cast<int>(config.data.loader_threads);
  train.seed = static_cast<uint64_t>(config.job.seed);
  train.state_blind = !config.policy.sees_state;
  return train;
}

policy::GazeEvalOptions gaze_eval_options(const JobConfig& config, GazeEvalFor which) {
  policy::GazeEvalOptions o;
  o.batch_size = config.eval.batch_size;
  o.threads = static_cast<int>(config.data.loader_threads);
  o.state_blind = !config.policy.sees_state;
  if (which == GazeEvalFor::kPolicyStage) {
    o.steps = config.policy.steps;
    o.max_images = config.policy.val_images;
    o.seed = static_cast<uint64_t>(config.job.seed) ^ 0x5eedu;
    return o;
  }
  o.steps = config.eval.glimpses;
  o.max_images = config.eval.images;
  o.seed = static_cast<uint64_t>(config.job.seed) ^ 0xe7a1u;  // the same gazes at every scale
  o.policy_version = 1;  // eval actors cache a policy's weights by version
  o.bilinear_upscale = config.eval.upscale == "bilinear";
  return o;
}

}  // namespace saccade::job_options
