#include "kernels/pyramid.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "kernels/parallel.h"

namespace saccade::kernels {

struct ImagePyramid::Levels {
  std::vector<cv::Mat> mats;  // 8-bit, HWC, continuous
  int channels = 0;
};

ImagePyramid::ImagePyramid() : levels_(std::make_unique<Levels>()) {}
ImagePyramid::~ImagePyramid() = default;
ImagePyramid::ImagePyramid(ImagePyramid&&) noexcept = default;
ImagePyramid& ImagePyramid::operator=(ImagePyramid&&) noexcept = default;

ImagePyramid ImagePyramid::build(const ImageView& image, int min_side) {
  ImagePyramid p;
  p.rebuild(image, min_side);
  return p;
}

void ImagePyramid::rebuild(const ImageView& image, int min_side) {
  validate_image(image, "image");
  if (min_side < 1)
    throw std::invalid_argument("min_side must be >= 1, got " + std::to_string(min_side));
  const std::size_t stride = image.row_stride != 0
                                 ? static_cast<std::size_t>(image.row_stride)
                                 : static_cast<std::size_t>(image.width) * image.channels;
  const cv::Mat src(image.height, image.width, CV_MAKETYPE(CV_8U, image.channels),
                    const_cast<std::uint8_t*>(image.data), stride);
  std::vector<cv::Mat> old = std::move(levels_->mats);
  std::vector<cv::Mat>& mats = levels_->mats;
  mats.clear();
  levels_->channels = image.channels;
  mats.push_back(src);  // the caller's pixels: no copy
  while (std::min(mats.back().rows, mats.back().cols) > min_side) {
    // pyrDown writes into the old level's buffer when it has the size and type.
    cv::Mat next = mats.size() < old.size() ? old[mats.size()] : cv::Mat();
    cv::pyrDown(mats.back(), next);
    mats.push_back(std::move(next));
  }
}

int ImagePyramid::levels() const {
  return static_cast<int>(levels_->mats.size());
}
int ImagePyramid::channels() const {
  return levels_->channels;
}

std::size_t ImagePyramid::bytes() const {
  std::size_t total = 0;
  for (const cv::Mat& m : levels_->mats) total += m.total() * m.elemSize();
  return total;
}

int ImagePyramid::level_for(double cell_pixels) const {
  const double l = std::round(std::log2(std::max(cell_pixels, 1e-9)));
  return static_cast<int>(std::clamp<double>(l, 0, levels() - 1));
}

ImageView ImagePyramid::level(int l) const {
  const cv::Mat& m = levels_->mats.at(static_cast<std::size_t>(l));
  return {m.data, m.rows, m.cols, levels_->channels, static_cast<std::ptrdiff_t>(m.step)};
}

namespace {

// One axis of a patch's bilinear taps: for each of the P cell centres, the first of
// two neighbouring level pixels (clamped to the level so reads stay inside) and the
// two weights, zero for a tap outside the level (the outside reads as zero).
struct Taps {
  std::vector<int> index;
  std::vector<float> w0, w1;
};

void axis_taps(double start, double cell, int p, float scale, int size, Taps& t) {
  t.index.resize(p);
  t.w0.resize(p);
  t.w1.resize(p);
  for (int k = 0; k < p; ++k) {
    const float u = (static_cast<float>(start + (k + 0.5) * cell) - 0.5f) * scale;
    const float fu = std::floor(u);
    const int i0 = static_cast<int>(fu);
    const float a = u - fu;
    float w0 = (i0 >= 0 && i0 < size) ? 1 - a : 0.0f;
    float w1 = (i0 + 1 >= 0 && i0 + 1 < size) ? a : 0.0f;
    // The two reads are pixels base and base + 1 (both pixel 0 on a 1-pixel level).
    const int base = std::clamp(i0, 0, std::max(size - 2, 0));
    if (size >= 2 && i0 == size - 1) {  // tap 0 is the last pixel, tap 1 outside
      w1 = w0;
      w0 = 0.0f;
    } else if (size >= 2 && i0 == -1) {  // tap 0 outside, tap 1 is pixel 0
      w0 = w1;
      w1 = 0.0f;
    }
    t.index[k] = base;
    t.w0[k] = w0;
    t.w1[k] = w1;
  }
}

// The blend for a level of C channels (a compile-time constant, so the channel loop
// unrolls).
template <int C>
void blend(const ImageView& m, const Taps& tx, const Taps& ty, int p, float* out) {
  const std::ptrdiff_t step1 = m.height >= 2 ? m.row_stride : 0;
  const std::ptrdiff_t cstep = m.width >= 2 ? C : 0;
  const std::size_t plane = static_cast<std::size_t>(p) * p;
  for (int i = 0; i < p; ++i) {
    const std::uint8_t* r0 = m.data + ty.index[i] * m.row_stride;
    const std::uint8_t* r1 = r0 + step1;
    const float a0 = ty.w0[i], a1 = ty.w1[i];
    float* o = out + static_cast<std::size_t>(i) * p;
    for (int j = 0; j < p; ++j) {
      const std::ptrdiff_t x = static_cast<std::ptrdiff_t>(tx.index[j]) * C;
      const float w00 = a0 * tx.w0[j], w01 = a0 * tx.w1[j], w10 = a1 * tx.w0[j],
                  w11 = a1 * tx.w1[j];
      for (int c = 0; c < C; ++c)
        o[c * plane + j] =
            w00 * r0[x + c] + w01 * r0[x + cstep + c] + w10 * r1[x + c] + w11 * r1[x + cstep + c];
    }
  }
}

void pyramid_patch(const ImagePyramid& pyr, const CropBox& b, int p, Taps& tx, Taps& ty,
                   float* out) {
  const double cw = (static_cast<double>(b.x1) - b.x0) / p;
  const double ch = (static_cast<double>(b.y1) - b.y0) / p;
  const int l = pyr.level_for(std::sqrt(cw * ch));
  const ImageView m = pyr.level(l);
  const float scale = std::ldexp(1.0f, -l);
  axis_taps(b.x0, cw, p, scale, m.width, tx);
  axis_taps(b.y0, ch, p, scale, m.height, ty);
  if (m.channels == 3)
    blend<3>(m, tx, ty, p, out);
  else
    blend<1>(m, tx, ty, p, out);
}

}  // namespace

void pyramid_patches(std::span<const ImagePyramid> pyramids, std::span<const CropBox> boxes,
                     int patch_size, float* out, int num_threads) {
  validate_crops(boxes, static_cast<int>(pyramids.size()), patch_size);
  if (boxes.empty()) return;
  if (out == nullptr) throw std::invalid_argument("out must not be null");
  for (std::size_t i = 0; i < pyramids.size(); ++i)
    if (pyramids[i].channels() != pyramids[0].channels())
      throw std::invalid_argument("pyramids[" + std::to_string(i) +
                                  "].channels must equal pyramids[0]'s");
  const std::size_t patch_floats =
      static_cast<std::size_t>(pyramids[0].channels()) * patch_size * patch_size;
  constexpr int kChunk = 32;  // neighbouring grid patches share lines, as in extract_patches
  const int chunks = static_cast<int>((boxes.size() + kChunk - 1) / kChunk);
  parallel_for(num_threads, chunks, [&](int chunk) {
    const std::size_t end = std::min(boxes.size(), static_cast<std::size_t>(chunk + 1) * kChunk);
    Taps tx, ty;
    for (std::size_t i = static_cast<std::size_t>(chunk) * kChunk; i < end; ++i)
      pyramid_patch(pyramids[boxes[i].image], boxes[i], patch_size, tx, ty, out + i * patch_floats);
  });
}

}  // namespace saccade::kernels
