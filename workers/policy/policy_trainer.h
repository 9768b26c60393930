// GRPO training of the gaze policy against the frozen backbone and task head
// (paper: "Policy Learning"), and the per-step evaluation of gaze sources.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "rl/grpo.h"
#include "workers/policy/gaze_eval_options.h"
#include "workers/policy/gaze_traces.h"
#include "workers/policy/policy_train_options.h"

namespace saccade::policy {

// What one epoch of training saw (means over its rollout batches).
struct PolicyEpoch {
  int64_t epoch = 0;
  int64_t images = 0;
  double mean_reward = 0;     // P(true class), over every step of every trace (whatever the reward)
  double final_accuracy = 0;  // top-1 after the last glimpse of the sampled traces
  double loss = 0, clip_fraction = 0, kl = 0;
  double std = 0;  // at the epoch's last batch
  double seconds = 0;
  // Of `seconds`: waiting for the rollouts (in this process or on rollout
  // actors) and the GRPO updates. Rollouts are drawn with the policy version
  // they train (synchronous GRPO): the version lag is 0 by construction.
  double rollout_seconds = 0, update_seconds = 0;
};

// Trains `policy` in place (on the backbone's device); the backbone and head are
// only read. Images are visited in a new order every epoch. `on_epoch` (may be
// empty) sees each epoch's figures as it ends. Throws std::invalid_argument on
// bad options or an empty dataset.
std::vector<PolicyEpoch> train_policy(model::FovealBackboneImpl& backbone,
                                      const probe::TaskHead& head, model::GazePolicyImpl& policy,
                                      const data::Dataset& dataset, const data::ViewOptions& views,
                                      const PolicyTrainOptions& options,
                                      const std::function<void(const PolicyEpoch&)>& on_epoch = {});

// Resuming and checkpointing a run (the policy learner's). Rollout batch u
// draws from mix_seed(seed, u) only, so a run resumed after u batches with the
// policy and AdamW state of that moment trains exactly what the whole run does.
struct PolicyProgress {
  int64_t start_update = 0;                    // rollout batches a checkpoint already trained on
  std::string optimizer_state;                 // the AdamW state of that checkpoint; "" = fresh
  model::GazePolicyImpl* reference = nullptr;  // KL reference; null = the policy at the start
  int64_t checkpoint_every = 0;                // batches between on_checkpoint calls; 0 = none
  // (batches trained so far, AdamW state), after every checkpoint_every-th
  // batch, after the last one, and when stopping() ends the run early.
  std::function<void(int64_t, const std::string&)> on_checkpoint;
  std::function<bool()> stopping;  // asked before each batch; may be empty
  // After every rollout batch trained on: (batches trained so far, the batch's
  // mean reward, P(true class) over its steps and traces). May be empty.
  std::function<void(int64_t, double)> on_batch;
};

// The same with rollouts from `rollouts` (in this process or on rollout
// actors) over images [0, dataset_size) of its dataset; `policy` trains where
// its parameters are. Returns early (after on_checkpoint) when stopping() turns
// true, also when the rollouts of the batch in flight fail because of it.
class RolloutSource;
std::vector<PolicyEpoch> train_policy(RolloutSource& rollouts, model::GazePolicyImpl& policy,
                                      int64_t dataset_size, const PolicyTrainOptions& options,
                                      const std::function<void(const PolicyEpoch&)>& on_epoch = {},
                                      const PolicyProgress& progress = {});

struct GazeEvaluation {
  std::vector<double> accuracy;  // [steps]: top-1 after each glimpse
  // [steps]: RMS distance (short-side units) of the images' gazes at each step from
  // their mean: 0 when every image is looked at in the same place, i.e. when the
  // gazes do not depend on what was seen.
  std::vector<double> gaze_spread;
  // [steps], policy sources only (else empty): the mean over images of the
  // entropy of the policy's mixture weights, H(softmax(logits)) in nats (0 =
  // one component decides, ln n_mix = all equal), from the state it read.
  std::vector<double> mixture_entropy;
};

// One trace per image over the first images of a dataset of `dataset_size`
// images, gazes from `source` (policy null unless needs_policy(source)), run
// by `rollouts`: in this process (LocalRollouts) or on eval actors (RolloutClient).
GazeEvaluation evaluate_gazes(RolloutSource& rollouts, model::GazePolicyImpl* policy,
                              GazeSource source, int64_t dataset_size,
                              const GazeEvalOptions& options);

}  // namespace saccade::policy
