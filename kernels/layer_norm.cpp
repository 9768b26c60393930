#include "kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/device_math.h"
#include "kernels/parallel.h"

#ifdef SACCADE_KERNELS_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace saccade::kernels {
namespace {

// The value as `type` holds it.
float rounded(FloatType type, float v) {
  return type == FloatType::kBFloat16 ? float_of_bf16(bf16_bits(v)) : v;
}

void check_shape(const NormShape& s) {
  if (s.rows < 0)
    throw std::invalid_argument("layer norm: rows must be >= 0, got " + std::to_string(s.rows));
  if (s.width < 1)
    throw std::invalid_argument("layer norm: width must be >= 1, got " + std::to_string(s.width));
}

void require(const void* p, const char* field) {
  if (p == nullptr) throw std::invalid_argument(std::string("layer norm: ") + field + " is null");
}

// Rows split into at most `tasks` runs of consecutive rows.
struct RowRuns {
  std::int64_t rows;
  int tasks;
  std::int64_t begin(int t) const { return rows * t / tasks; }
};

RowRuns row_runs(std::int64_t rows, int num_threads) {
  const int threads = num_threads > 0 ? num_threads : hardware_threads();
  return {rows, static_cast<int>(std::clamp<std::int64_t>(rows / 64, 1, threads))};
}

}  // namespace

void validate_norm(const NormShape& shape, const AddNormForward& f) {
  check_shape(shape);
  require(f.x, "x");
  require(f.branch, "branch");
  require(f.gamma, "gamma");
  require(f.beta, "beta");
  require(f.sum, "sum");
  require(f.y, "y");
  require(f.mean, "mean");
  require(f.rstd, "rstd");
}

void validate_norm(const NormShape& shape, const AddNormBackward& b) {
  check_shape(shape);
  require(b.dy, "dy");
  require(b.sum, "sum");
  require(b.mean, "mean");
  require(b.rstd, "rstd");
  require(b.gamma, "gamma");
  require(b.dx, "dx");
  require(b.d_gamma, "d_gamma");
  require(b.d_beta, "d_beta");
}

void add_layer_norm_forward(const NormShape& shape, const AddNormForward& f, float eps,
                            int num_threads) {
  validate_norm(shape, f);
  const int w = shape.width;
  const FloatType type = shape.type;
  const RowRuns runs = row_runs(shape.rows, num_threads);
  parallel_for(num_threads, runs.tasks, [&](int t) {
    std::vector<float> v(static_cast<std::size_t>(w));
    for (std::int64_t r = runs.begin(t); r < runs.begin(t + 1); ++r) {
      const std::int64_t first = r * w;
      float total = 0;
      for (int j = 0; j < w; ++j) {
        v[j] =
            rounded(type, load_value(f.x, type, first + j) + load_value(f.branch, type, first + j));
        store_value(f.sum, type, first + j, v[j]);
        total += v[j];
      }
      const float mean = total / static_cast<float>(w);
      float squares = 0;
      for (int j = 0; j < w; ++j) squares += (v[j] - mean) * (v[j] - mean);
      const float rstd = 1.0f / std::sqrt(squares / static_cast<float>(w) + eps);
      for (int j = 0; j < w; ++j)
        store_value(
            f.y, type, first + j,
            (v[j] - mean) * rstd * load_value(f.gamma, type, j) + load_value(f.beta, type, j));
      f.mean[r] = mean;
      f.rstd[r] = rstd;
    }
  });
}

void add_layer_norm_backward(const NormShape& shape, const AddNormBackward& b, int num_threads) {
  validate_norm(shape, b);
  const int w = shape.width;
  const FloatType type = shape.type;
  const RowRuns runs = row_runs(shape.rows, num_threads);
  // Per run: d_gamma's and d_beta's partial sums, added in run order (deterministic).
  std::vector<float> partial(static_cast<std::size_t>(runs.tasks) * 2 * w, 0.0f);
  parallel_for(num_threads, runs.tasks, [&](int t) {
    float* d_gamma = partial.data() + static_cast<std::size_t>(t) * 2 * w;
    float* d_beta = d_gamma + w;
    std::vector<float> xhat(static_cast<std::size_t>(w)), g(static_cast<std::size_t>(w));
    for (std::int64_t r = runs.begin(t); r < runs.begin(t + 1); ++r) {
      const std::int64_t first = r * w;
      float g_sum = 0, gx_sum = 0;
      for (int j = 0; j < w; ++j) {
        const float dy = load_value(b.dy, type, first + j);
        xhat[j] = (load_value(b.sum, type, first + j) - b.mean[r]) * b.rstd[r];
        g[j] = dy * load_value(b.gamma, type, j);
        g_sum += g[j];
        gx_sum += g[j] * xhat[j];
        d_gamma[j] += dy * xhat[j];
        d_beta[j] += dy;
      }
      const float g_mean = g_sum / static_cast<float>(w), gx_mean = gx_sum / static_cast<float>(w);
      for (int j = 0; j < w; ++j) {
        float dx = b.rstd[r] * (g[j] - g_mean - xhat[j] * gx_mean);
        if (b.d_sum != nullptr) dx += load_value(b.d_sum, type, first + j);
        store_value(b.dx, type, first + j, dx);
      }
    }
  });
  for (int j = 0; j < w; ++j) {
    float d_gamma = 0, d_beta = 0;
    for (int t = 0; t < runs.tasks; ++t) {
      d_gamma += partial[static_cast<std::size_t>(t) * 2 * w + j];
      d_beta += partial[static_cast<std::size_t>(t) * 2 * w + w + j];
    }
    store_value(b.d_gamma, type, j, d_gamma);
    store_value(b.d_beta, type, j, d_beta);
  }
}

namespace {
// The widths the CUDA kernels take: rows of 16-byte vectors held by one warp.
int values_per_vector(FloatType type) {
  return type == FloatType::kBFloat16 ? 8 : 4;
}
bool cuda_width(const NormShape& shape) {
  return shape.width >= 1 && shape.width <= kMaxFusedNormWidth &&
         shape.width % values_per_vector(shape.type) == 0;
}
}  // namespace

bool add_layer_norm_cuda_supports(const NormShape& shape) {
#ifdef SACCADE_KERNELS_CUDA
  return cuda_width(shape);
#else
  (void)shape;
  return false;
#endif
}

std::size_t add_layer_norm_scratch_floats(const NormShape& shape) {
#ifdef SACCADE_KERNELS_CUDA
  return cuda::detail::add_norm_scratch_floats(shape.rows, shape.width);
#else
  return 2 * static_cast<std::size_t>(std::max(shape.width, 0));
#endif
}

namespace {
// The CUDA kernels read and write rows as 16-byte vectors.
void check_cuda_call(const NormShape& shape, const char* what,
                     std::initializer_list<std::pair<const void*, const char*>> pointers) {
  if (!cuda_width(shape))
    throw std::invalid_argument(std::string(what) + ": width " + std::to_string(shape.width) +
                                " must be a multiple of " +
                                std::to_string(values_per_vector(shape.type)) + " and at most " +
                                std::to_string(kMaxFusedNormWidth));
  for (const auto& [p, field] : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(std::string(what) + ": " + field + " is not 16-byte aligned");
}
}  // namespace

void add_layer_norm_forward_cuda(const NormShape& shape, const AddNormForward& f, float eps,
                                 void* stream) {
  validate_norm(shape, f);
  check_cuda_call(shape, "add_layer_norm_forward_cuda",
                  {{f.x, "x"},
                   {f.branch, "branch"},
                   {f.gamma, "gamma"},
                   {f.beta, "beta"},
                   {f.sum, "sum"},
                   {f.y, "y"}});
#ifdef SACCADE_KERNELS_CUDA
  const cudaError_t err =
      cuda::detail::launch_add_norm_forward(shape, f, eps, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("add_layer_norm_forward_cuda: ") +
                             cudaGetErrorString(err));
#else
  (void)eps, (void)stream;
  throw std::runtime_error(
      "add_layer_norm_forward_cuda: this build has no CUDA backend (configure with "
      "-DSACCADE_CUDA=ON)");
#endif
}

void add_layer_norm_backward_cuda(const NormShape& shape, const AddNormBackward& b, float* scratch,
                                  void* stream) {
  validate_norm(shape, b);
  check_cuda_call(
      shape, "add_layer_norm_backward_cuda",
      {{b.dy, "dy"}, {b.sum, "sum"}, {b.gamma, "gamma"}, {b.d_sum, "d_sum"}, {b.dx, "dx"}});
  require(scratch, "scratch");
#ifdef SACCADE_KERNELS_CUDA
  const cudaError_t err =
      cuda::detail::launch_add_norm_backward(shape, b, scratch, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("add_layer_norm_backward_cuda: ") +
                             cudaGetErrorString(err));
#else
  (void)stream;
  throw std::runtime_error(
      "add_layer_norm_backward_cuda: this build has no CUDA backend (configure with "
      "-DSACCADE_CUDA=ON)");
#endif
}

}  // namespace saccade::kernels
