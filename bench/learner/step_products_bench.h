// `saccade bench step --products`: the matrix products of the step's linear layers
// (ssl::step_products) and its attention (each pass's QK^T, softmax and AV, as the model
// runs them) timed alone on the device at the step's shapes. What they take is the least a
// step can take while they run at this rate, so the model FLOPs over that time bound the
// step's MFU from above: how far the step is from its products and attention, and how far
// those are from the device's peak.
#pragma once

#include <torch/types.h>

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <vector>

#include "workers/ssl/step_flops.h"

namespace saccade::bench {

struct StepShapes {
  std::vector<ssl::StepPass> passes;
  std::vector<ssl::StepProduct> products;
  int64_t depth = 0, heads = 0, width = 0;  // the backbone's
};

// Times each distinct product and attention shape `reps` times after 2 warm-up calls (a
// product's forward with the bias and, where the step takes them, its input and weight
// gradients; attention's forward and backward) in `dtype` on `device`. Prints a table and
// the totals to `out` and returns them as JSON. `model_flop_per_step`: the step's model
// FLOPs at this batch; `peak_tflops` <= 0: unknown (no share of peak, no bound).
nlohmann::ordered_json time_step_shapes(const StepShapes& shapes, const torch::Device& device,
                                        torch::ScalarType dtype, int reps,
                                        double model_flop_per_step, double peak_tflops,
                                        std::ostream& out);

}  // namespace saccade::bench
