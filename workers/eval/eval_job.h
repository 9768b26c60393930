// `saccade eval CONFIG` and the eval stage (paper, Experiments): the frozen
// backbone, the probe's heads and the gaze policy measured on the validation
// split in every mode of eval.modes (top-1 after each glimpse), and a
// resolution sweep (the images resized by each of eval.scales: the foveal
// modes against a ViT of fixed patch size, with the compute each spends per
// image). Torch-free header.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/config.h"
#include "workers/policy/policy_job.h"

namespace saccade::policy {
class RolloutSource;
}  // namespace saccade::policy

namespace saccade::eval {

// The report `saccade eval` writes in job.work_dir, and the eval stage's checkpoint blob.
inline constexpr const char* kEvalReportFile = "eval.json";

// The inputs cannot be evaluated as given (a head without the ViT-mode head,
// no policy for mode policy, weights that do not fit the config): running
// again with the same inputs fails the same way.
class EvalInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What is evaluated, as bytes: the eval actor gets them from the coordinator,
// `saccade eval` from files.
struct EvalInputs {
  policy::ProbeHeadInputs probe;  // the task and ViT-mode heads, and their backbone
  std::string policy_bytes;       // policy.safetensors; needed with mode "policy" only
  std::string policy_origin;      // names them in errors
  std::string fixed_path_bytes;   // policy_fixed_path.safetensors; mode "fixed_path" only
  std::string fixed_path_origin;  // names them in errors
};

struct EvalRunOptions {
  int64_t max_images = 0;        // overrides eval.images when > 0
  int64_t max_sweep_images = 0;  // overrides eval.sweep_images when > 0
  // After every batch (may be empty): the eval leader reports progress with it
  // and throws from it to stop at a drain.
  std::function<void()> on_progress;
  // Where the glimpse traces of the gaze modes run (borrowed): the eval
  // actors (a RolloutClient); null = in this process.
  policy::RolloutSource* rollouts = nullptr;
};

// Validation top-1 of one mode after glimpse 1..eval.glimpses (vit: one value,
// its single step). gaze_spread: RMS distance of the images' gazes from their
// mean per glimpse (short sides; 0 for a path shared by every image).
struct EvalCurve {
  std::string mode;
  std::vector<double> accuracy;
  std::vector<double> gaze_spread;
  std::vector<double> mixture_entropy;  // mode policy: GazeEvaluation::mixture_entropy
};

// One mode at one resolution of the sweep.
struct SweepPoint {
  std::string mode;  // a mode of eval.modes, or vit_fixed_patch
  double scale = 1;
  int64_t image_side = 0;   // the first image's short side at this scale, pixels
  double accuracy = 0;      // after the last glimpse (vit modes: their one step)
  int64_t tokens = 0;       // patch tokens the backbone reads per image, all steps
  double gflops = 0;        // the backbone's forward per image (model/flops.h)
  double ms_per_image = 0;  // wall time per image: decoding, integral image, views, backbone
};

struct EvalReport {
  int64_t checkpoint_step = -1;  // the probe head's
  std::string backbone_file;     // the probe head's backbone file ("": a checkpoint's teacher)
  std::string task_head;         // its kind: linear | transformer (TaskHead::kind)
  int64_t images = 0;
  int64_t sweep_images = 0;
  int64_t glimpses = 0;
  bool policy_sees_state = true;
  std::vector<EvalCurve> curves;
  std::vector<SweepPoint> sweep;
  std::string report_path;  // job.work_dir/eval.json
  std::string json;         // its text
};

// The two tables `saccade eval` prints: top-1 per glimpse per mode; the sweep.
std::string format_eval_table(const EvalReport& report);

// Measures `inputs`, writes job.work_dir/eval.json and returns the report.
// Throws EvalInputError naming the input that is missing or does not fit.
EvalReport evaluate_models(const JobConfig& config, const EvalInputs& inputs,
                           const EvalRunOptions& options);

// `saccade eval`: the inputs from policy.input_dir (job.work_dir when empty):
// probe_head.safetensors, the pretraining checkpoint it names, and
// policy.safetensors when eval.modes has policy.
EvalReport run_eval(const JobConfig& config, const EvalRunOptions& options = {});

}  // namespace saccade::eval
