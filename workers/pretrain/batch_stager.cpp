#include "workers/pretrain/batch_stager.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#if SACCADE_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace saccade::pretrain {

std::array<const data::PixelViews*, 5> view_sets(const data::SslBatch& batch) {
  return {&batch.teacher_global, &batch.student_global, &batch.student_local, &batch.teacher_seq,
          &batch.student_seq};
}

#if SACCADE_TORCH_HAS_CUDA
namespace {

// One array of the batch and its place in the staging buffer.
struct Piece {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t offset = 0;
};

// Pieces start on 64-byte boundaries, so that every float array is aligned on the device.
size_t aligned(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// Host copies into the page-locked buffer run on a few threads: at batch 512 a batch is about
// 1 GB of patches, and one thread's copy would take a good part of a step.
constexpr size_t kCopyThreads = 4;
constexpr size_t kCopyChunk = size_t{8} << 20;

void copy_pieces(const std::vector<Piece>& pieces, uint8_t* to) {
  std::vector<Piece> chunks;
  for (const Piece& p : pieces)
    for (size_t done = 0; done < p.bytes; done += kCopyChunk)
      chunks.push_back({p.data + done, std::min(kCopyChunk, p.bytes - done), p.offset + done});
  auto copy_every = [&](size_t first) {
    for (size_t i = first; i < chunks.size(); i += kCopyThreads)
      std::memcpy(to + chunks[i].offset, chunks[i].data, chunks[i].bytes);
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(kCopyThreads, chunks.size()); ++t)
    threads.emplace_back(copy_every, t);
  copy_every(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace

// A batch on its way: the device buffer that holds all its arrays, the event its copy
// records, and where each view set's arrays lie in it.
struct Staged {
  at::Tensor buffer;
  std::shared_ptr<at::cuda::CUDAEvent> copied;
  std::array<size_t, 5> pixels_at{}, positions_at{};
  std::vector<size_t> images_at;
};

namespace {

Staged stage_now(const data::SslBatch& batch, const torch::Device& device,
                 const c10::cuda::CUDAStream& side) {
  const c10::cuda::CUDAGuard device_guard(device.index());
  const auto sets = view_sets(batch);
  Staged out;
  std::vector<Piece> pieces;
  size_t total = 0;
  auto place = [&](const void* data, size_t bytes) {
    pieces.push_back({static_cast<const uint8_t*>(data), bytes, total});
    const size_t at = total;
    total = aligned(total + bytes);
    return at;
  };
  for (size_t i = 0; i < sets.size(); ++i) {
    const data::PixelViews& set = *sets[i];
    if (set.boxes.empty()) out.pixels_at[i] = place(set.pixels.data(), set.pixels.size());
    out.positions_at[i] = place(set.positions.data(), set.positions.size() * sizeof(float));
  }
  for (const data::ShippedImage& image : batch.images)
    out.images_at.push_back(place(image.pixels.data(), image.pixels.size()));
  const at::Tensor host = at::empty({static_cast<int64_t>(std::max<size_t>(total, 1))},
                                    at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  copy_pieces(pieces, host.data_ptr<uint8_t>());
  const c10::cuda::CUDAStreamGuard stream_guard(side);
  // The page-locked block goes back to LibTorch's host cache when `host` goes; the copy
  // recorded its use, so the block is not handed out again before the copy is done.
  out.buffer = host.to(device, /*non_blocking=*/true);
  out.copied = std::make_shared<at::cuda::CUDAEvent>();
  out.copied->record(side);
  return out;
}

}  // namespace

struct BatchStager::Impl {
  torch::Device device;
  // Every copy runs on this one stream: the caching allocator reuses a freed block only for
  // its own stream, so a stream per batch would keep a batch-sized block cached per pool
  // stream (32 of them, ~1 GB each at batch 512).
  c10::cuda::CUDAStream stream;
  const data::SslBatch* staged = nullptr;  // not owned: the caller keeps it until take()
  std::future<Staged> pending;
};

BatchStager::BatchStager(const torch::Device& device) {
  if (!device.is_cuda())
    throw std::invalid_argument("BatchStager: expected a CUDA device, got " + device.str());
  impl_ = std::make_unique<Impl>(
      Impl{device, c10::cuda::getStreamFromPool(false, device.index()), nullptr, {}});
}

BatchStager::~BatchStager() {
  forget();
}

void BatchStager::stage(const data::SslBatch& batch) {
  if (impl_->pending.valid()) impl_->pending.wait();  // its batch may go once this returns
  impl_->staged = &batch;
  impl_->pending =
      std::async(std::launch::async, stage_now, std::cref(batch), impl_->device, impl_->stream);
}

void BatchStager::forget() {
  impl_->staged = nullptr;
  if (!impl_->pending.valid()) return;
  try {
    impl_->pending.get();
  } catch (...) {  // the copy of a batch nobody will step
  }
}

std::optional<StagedBatch> BatchStager::take(const data::SslBatch& batch) {
  if (!impl_->pending.valid()) return std::nullopt;
  const bool ours = impl_->staged == &batch;
  impl_->staged = nullptr;
  Staged staged = impl_->pending.get();
  if (!ours) return std::nullopt;
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(impl_->device.index());
  staged.copied->block(current);         // the step's kernels start after the copy
  staged.buffer.record_stream(current);  // and its memory is not reused before they end
  StagedBatch out;
  const auto sets = view_sets(batch);
  const int64_t channels = sets[0]->channels;
  for (size_t i = 0; i < batch.images.size(); ++i) {
    const data::ShippedImage& image = batch.images[i];
    out.images.push_back(staged.buffer
                             .narrow(0, static_cast<int64_t>(staged.images_at[i]),
                                     int64_t{image.height} * image.width * channels)
                             .view({image.height, image.width, channels}));
  }
  for (size_t i = 0; i < sets.size(); ++i) {
    const data::PixelViews& set = *sets[i];
    if (set.boxes.empty())
      out.views[i].patches =
          staged.buffer
              .narrow(0, static_cast<int64_t>(staged.pixels_at[i]),
                      static_cast<int64_t>(set.pixels.size()))
              .view({set.views, set.tokens, set.channels, set.patch_size, set.patch_size});
    out.views[i].positions = staged.buffer
                                 .narrow(0, static_cast<int64_t>(staged.positions_at[i]),
                                         static_cast<int64_t>(set.positions.size() * sizeof(float)))
                                 .view(torch::kFloat)
                                 .view({set.views, set.tokens, 3});
  }
  return out;
}

#else  // a LibTorch without CUDA: nothing to stage to

struct BatchStager::Impl {};

BatchStager::BatchStager(const torch::Device& device) {
  throw std::invalid_argument("BatchStager: this build's LibTorch has no CUDA (device " +
                              device.str() + ")");
}

BatchStager::~BatchStager() = default;

void BatchStager::stage(const data::SslBatch&) {}

void BatchStager::forget() {}

std::optional<StagedBatch> BatchStager::take(const data::SslBatch&) {
  return std::nullopt;
}

#endif

}  // namespace saccade::pretrain
