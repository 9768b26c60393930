// Foveal patch extraction from integral images: crop + box-filter resize of any
// batch of boxes to P x P patches, reading only the (P+1)^2 corners per channel a
// patch needs. One interface, two backends chosen at build time (CPU always, CUDA
// when built with SACCADE_WITH_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kernels/integral_image.h"

namespace saccade::kernels {

// A crop in pixel coordinates of image `image` of a batch: [x0, x1) x [y0, y1),
// origin at the top-left corner of the top-left pixel. May leave the image: the
// outside reads as zero and counts in every cell's area. Rectangles are allowed.
struct CropBox {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int image = 0;
};

// Largest supported patch side (P).
inline constexpr int kMaxPatchSize = 128;
// Cells of at most this many in-image pixels take the fast path (one wrapped 4-corner
// read; the sum, < 2^31, converts to float exactly rounded as a signed int); bigger
// ones (a P = 1 patch of a whole 4096^2 image, say) are summed exactly as strips.
inline constexpr long long kMaxFastCellPixels = 8421504;  // floor((2^31 - 1) / 255)
// Crop coordinates beyond this magnitude are rejected as nonsense.
inline constexpr float kMaxCropCoordinate = 1e9f;

// Throws std::invalid_argument naming `boxes[i].<field>` or `patch_size` when a box is
// not finite, empty (x1 <= x0 or y1 <= y0), out of range, or names no image of a
// batch of `num_images`; or when patch_size is not in [1, kMaxPatchSize].
void validate_crops(std::span<const CropBox> boxes, int num_images, int patch_size);

// Throws std::invalid_argument naming `images[i].<field>` when an image of a batch is
// invalid (validate_image) or its channel count differs from images[0]'s.
void validate_images(std::span<const ImageView> images);

// Box filter, nearest rounding of borders: cell k of a crop spans pixels
// [b_k, max(b_{k+1}, b_k + 1)) with b_k = floor(x0 + ((x1 - x0) / P) * k + 0.5) (and the
// same along y); so a crop narrower than P pixels upsamples by nearest neighbour.
// value = (box sum) / (cell area in pixels), in float32 on the 0..255 scale, computed
// as float(sum) * (1/h_r * 1/w_k) in float (exactly rounded double division for cells
// above kMaxFastCellPixels), identically on CPU and CUDA; relative error < 3e-7.
//
// Writes boxes.size() patches to out, layout [N, C, P, P] (channel-major per patch).
// All images must have the same channel count. num_threads: 0 = all hardware threads.
void extract_patches(std::span<const IntegralImage> images, std::span<const CropBox> boxes,
                     int patch_size, float* out, int num_threads = 1);

enum class Backend { kCpu, kCuda };

// True when this build compiled the CUDA backend (SACCADE_WITH_CUDA).
bool cuda_backend_compiled();
// True when the CUDA backend is compiled and at least one device is present.
bool cuda_device_available();

// The backend interface: owns the tables of the current batch of images.
class Extractor {
 public:
  virtual ~Extractor() = default;
  virtual Backend backend() const = 0;
  // Builds the tables of a new batch (replacing the previous one, reusing memory).
  // Throws std::invalid_argument when a view is invalid or channel counts differ.
  virtual void set_images(std::span<const ImageView> images) = 0;
  virtual int num_images() const = 0;
  virtual int channels() const = 0;
  // Extracts into host memory `out`, layout [N, C, P, P]; boxes refer to the batch.
  virtual void extract(std::span<const CropBox> boxes, int patch_size, float* out) = 0;
  // Extracts into the backend's own memory `out_device`, layout [N, C, P, P]: host memory
  // for kCpu (the same as extract), memory of the CUDA device for kCuda (e.g. a tensor on
  // it), skipping a copy back to the host. Synchronous: the patches are there on return.
  virtual void extract_to_device(std::span<const CropBox> boxes, int patch_size,
                                 float* out_device) = 0;
  // The tables of `images` and the cut of `boxes` into `out_device` ([N, C, P, P]), for a
  // caller whose images already lie in this backend's memory (device pointers for kCuda,
  // rows packed: row_stride 0 or width * channels; host memory for kCpu). kCuda queues all
  // of it on `stream`, a cudaStream_t of this extractor's device (nullptr: the legacy
  // default stream), and returns without waiting for the device: the images and
  // `out_device` must stay valid until the stream has run it. Calls are ordered among
  // themselves whatever their streams. kCpu does the work before returning (`stream`
  // unused). Replaces the batch of set_images. Throws std::invalid_argument as set_images
  // and extract do, before anything is queued.
  virtual void extract_queued(std::span<const ImageView> images, std::span<const CropBox> boxes,
                              int patch_size, float* out_device, void* stream) = 0;
  // How often this extractor's calls have blocked the host until the device caught up
  // (kCuda: the synchronous calls' own waits, a buffer that grew, a staging area the previous
  // extract_queued's copies were still reading); 0 for kCpu. A learner counts it per step:
  // a wait there idles the device while the host dispatches what follows.
  virtual std::int64_t host_waits() const { return 0; }
};

// Where the CUDA backend takes device memory for its tables and buffers. By default cudaMalloc
// and cudaFree; a learner hands its framework's caching allocator, so that the extractor and
// the model draw on one pool: near full memory an allocation there frees cached blocks and
// retries, where a cudaMalloc beside a full cache fails.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // `bytes` of the current device's memory, first used by work queued on `stream` (a
  // cudaStream_t); throws std::runtime_error (or the framework's error) when there is none.
  virtual void* allocate(std::size_t bytes, void* stream) = 0;
  // Returns `memory` from allocate; no work on it is pending any more.
  virtual void release(void* memory) = 0;
};

struct ExtractorOptions {
  Backend backend = Backend::kCpu;
  int num_threads = 0;  // CPU: 0 = all hardware threads
  int device = 0;       // CUDA device ordinal
  // CUDA: not owned, outlives the extractor; nullptr: cudaMalloc / cudaFree.
  DeviceAllocator* device_allocator = nullptr;
};

// Throws std::runtime_error when the CUDA backend is asked for but not compiled in
// or no device is present.
std::unique_ptr<Extractor> make_extractor(const ExtractorOptions& options = {});

}  // namespace saccade::kernels
