// Backend selection behind the Extractor interface. The CUDA backend lives in
// kernels/cuda/ and is linked in only when the build has SACCADE_WITH_CUDA.
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/extract.h"

#ifdef SACCADE_KERNELS_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace saccade::kernels {
namespace {

class CpuExtractor final : public Extractor {
 public:
  explicit CpuExtractor(int num_threads) : num_threads_(num_threads) {}

  Backend backend() const override { return Backend::kCpu; }

  void set_images(std::span<const ImageView> images) override {
    validate_images(images);
    if (tables_.size() < images.size()) tables_.resize(images.size());
    for (std::size_t i = 0; i < images.size(); ++i) tables_[i].rebuild(images[i], num_threads_);
    num_images_ = static_cast<int>(images.size());
  }

  int num_images() const override { return num_images_; }
  int channels() const override { return num_images_ > 0 ? tables_[0].channels() : 0; }

  void extract(std::span<const CropBox> boxes, int patch_size, float* out) override {
    extract_patches(std::span<const IntegralImage>(tables_.data(), num_images_), boxes, patch_size,
                    out, num_threads_);
  }

  void extract_to_device(std::span<const CropBox> boxes, int patch_size, float* out) override {
    extract(boxes, patch_size, out);
  }

  void extract_queued(std::span<const ImageView> images, std::span<const CropBox> boxes,
                      int patch_size, float* out, void* /*stream*/) override {
    validate_crops(boxes, static_cast<int>(images.size()), patch_size);
    set_images(images);
    extract(boxes, patch_size, out);
  }

 private:
  int num_threads_;
  std::vector<IntegralImage> tables_;  // owned; storage reused across batches
  int num_images_ = 0;
};

}  // namespace

void validate_images(std::span<const ImageView> images) {
  for (std::size_t i = 0; i < images.size(); ++i) {
    validate_image(images[i], ("images[" + std::to_string(i) + "]").c_str());
    if (images[i].channels != images[0].channels)
      throw std::invalid_argument("images[" + std::to_string(i) +
                                  "].channels must equal images[0].channels (" +
                                  std::to_string(images[0].channels) + ")");
  }
}

bool cuda_backend_compiled() {
#ifdef SACCADE_KERNELS_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_available() {
#ifdef SACCADE_KERNELS_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Extractor> make_extractor(const ExtractorOptions& options) {
  if (options.backend == Backend::kCpu) return std::make_unique<CpuExtractor>(options.num_threads);
#ifdef SACCADE_KERNELS_CUDA
  if (cuda::device_count() <= 0)
    throw std::runtime_error("CUDA extractor requested but no CUDA device is present");
  return cuda::make_cuda_extractor(options.device, options.device_allocator);
#else
  throw std::runtime_error(
      "CUDA extractor requested but this build has no CUDA backend (configure with "
      "-DSACCADE_CUDA=ON)");
#endif
}

}  // namespace saccade::kernels
