// Glimpse sequences of the FROZEN backbone whose gazes come from the gaze
// policy (sampled for GRPO, or its most likely point for evaluation) or are
// uniform at random: the rollouts of GRPO and the measurements of evaluation.
// Every glimpse is cut from the image's integral image, built once per image.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "dataloader/dataset.h"
#include "dataloader/views.h"
#include "workers/probe/task_head.h"

namespace saccade::model {
class FovealBackboneImpl;
class GazePolicyImpl;
}  // namespace saccade::model

namespace saccade::policy {

enum class GazeSource {
  kPolicySample,  // a draw from the policy's mixture (GRPO rollouts)
  kPolicyMode,    // the mean of the policy's heaviest component (evaluation)
  kRandom,        // uniform inside the image (the random-gaze baseline)
  kScan,          // a fixed scan path: the centre, then the other cells of a 3 x 3 grid
};

// Whether `source` draws from a policy (the others need none).
inline bool needs_policy(GazeSource source) {
  return source == GazeSource::kPolicySample || source == GazeSource::kPolicyMode;
}

// Glimpse t of the fixed scan path in an image of extent (ex, ey) (short-side
// units): the centre first, then the cells of a 3 x 3 grid in raster order
// without the centre, then the path again.
std::pair<float, float> scan_gaze(int64_t t, float ex, float ey);

struct TraceOptions {
  int64_t steps = 8;  // T glimpses per trace
  int64_t group = 1;  // G traces per image
  GazeSource source = GazeSource::kRandom;
  double std = 0.1;  // the mixture's std (kPolicySample), short-side units
  // Every random draw of trace i of image b (foveal zooms, random gazes, policy
  // draws) comes from mix_seed(image_seeds[b], i): a trace does not depend on
  // the batch it runs in, so rollouts split across actors are the ones one
  // process would run. Empty image_seeds: image b's seed is mix_seed(seed, b).
  uint64_t seed = 0;
  std::vector<uint64_t> image_seeds;
  int threads = 1;  // glimpse-cutting threads
  // The policy reads glimpse_code(t) instead of the backbone's state, so it
  // can only learn one path for every image: the best fixed scan path baseline.
  bool state_blind = false;
};

// What a state-blind policy reads before glimpse t: [n, n_state, width] zeros
// with a 1 at [:, 0, t]. Throws std::invalid_argument when t >= width.
at::Tensor glimpse_code(int64_t n, int64_t n_state, int64_t width, int64_t t);

// N = B x G traces, image-major: trace i of image b is row b * G + i, so a
// [T, N] tensor reshapes to [T, B, G] for group_advantages. On the CPU, fp32.
struct Traces {
  at::Tensor states;    // [T, N, n_state, D]: the state the policy read before glimpse t
  at::Tensor extent;    // [N, 2]: (W, H) / min(W, H) of the trace's image
  at::Tensor gazes;     // [T, N, 2]: where glimpse t looked (inside the image)
  at::Tensor log_prob;  // [T, N]: log density of the gaze under the sampling policy; 0 for kRandom
  at::Tensor rewards;   // [T, N]: the task head's probability of the true class after glimpse t
  at::Tensor correct;   // [T, N] bool: the head's argmax is the true class after glimpse t
};

// Runs T glimpses of every trace. `policy` may be null unless needs_policy(source).
// Labels must lie in [0, classes). The models stay where they are (the policy
// on the backbone's device) and are left in the train/eval mode they were in.
// Throws std::invalid_argument on mismatched input.
Traces run_traces(model::FovealBackboneImpl& backbone, const probe::TaskHead& head,
                  model::GazePolicyImpl* policy, const std::vector<data::GlimpseCutter>& images,
                  const std::vector<int64_t>& labels, const TraceOptions& options);

// Cutters for the dataset images at `indices` (a corrupt image is replaced by
// its next good neighbour, as everywhere in the loaders), built on `threads`
// threads; their labels go to *labels.
std::vector<data::GlimpseCutter> load_glimpse_cutters(const data::Dataset& dataset,
                                                      const data::ViewOptions& views,
                                                      const std::vector<int64_t>& indices,
                                                      int threads, std::vector<int64_t>* labels);

// Per-step top-1 accuracy ([T]) of traces: correct.mean over traces.
std::vector<double> step_accuracy(const Traces& traces);

}  // namespace saccade::policy
