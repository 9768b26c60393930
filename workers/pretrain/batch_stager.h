// Copies the next step's batch to the learner's GPU while the current step runs, as a
// PyTorch DataLoader with pin_memory and non-blocking copies does: on a thread of its own
// into one page-locked buffer, then one copy on a side stream. The step that takes the
// batch makes its stream wait for that copy on the device; the host does not wait. Without
// it the upload is the step's first phase with the device idle (241 ms of a 1,040 ms step
// at batch 256 on an H200 when patches travelled as fp32: docs/model.md).
//
// It stages what the step uploads of every view set: the uint8 patches (none when the
// learner cuts the views) and the positions, and the images shipped for the learner to cut.
// A learner that cuts on a GPU stages each batch even without prefetching (staged and taken
// at once), so that the cut is queued without a wait.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "dataloader/views.h"
#include "workers/ssl/view_tensors.h"

namespace saccade::pretrain {

// A batch's five view sets in the order the step uses them: teacher global, student
// global, student local, teacher sequential, student sequential.
std::array<const data::PixelViews*, 5> view_sets(const data::SslBatch& batch);

// A batch on the device, ready on the current stream once the work queued on it reaches it.
struct StagedBatch {
  std::array<ssl::ViewTensors, 5> views;  // per view set; patches undefined when the learner cuts
  std::vector<torch::Tensor> images;      // the shipped images, uint8 [H, W, C], when it cuts
};

class BatchStager {
 public:
  // Throws std::invalid_argument when `device` is not a CUDA device of this build.
  explicit BatchStager(const torch::Device& device);
  ~BatchStager();  // waits for the staging under way
  BatchStager(const BatchStager&) = delete;
  BatchStager& operator=(const BatchStager&) = delete;

  // Starts staging `batch` and returns at once; drops a batch staged and not taken.
  // `batch` must stay alive and unchanged until take(batch) or the next stage().
  void stage(const data::SslBatch& batch);

  // The staged tensors of `batch`; nullopt when `batch` is not the batch staged. Rethrows an
  // error of the staging.
  std::optional<StagedBatch> take(const data::SslBatch& batch);

  // Drops the batch staged, if any (waiting for its host copy, which reads the batch).
  void forget();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the staging under way
};

}  // namespace saccade::pretrain
