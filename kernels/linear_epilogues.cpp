#include "kernels/linear_epilogues.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#ifdef SACCADE_KERNELS_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/device_scope.h"

#include <map>
#include <mutex>
#include <tuple>
#endif

namespace saccade::kernels {
namespace {

constexpr std::size_t kAlignment = 16;  // of every pointer: what the cached algorithms assume

bool widths_ok(std::int64_t rows, std::initializer_list<int> widths) {
  if (rows < 1 || rows > INT32_MAX) return false;
  for (const int w : widths)
    if (w < 1 || w % 8 != 0) return false;
  return true;
}

bool shape_ok(const LinearGeluShape& s) {
  return widths_ok(s.rows, {s.in, s.hidden, s.out});
}
bool shape_ok(const WeightGradShape& s) {
  return widths_ok(s.rows, {s.in, s.out});
}

// Throws std::invalid_argument naming the call and every size when the shape is not taken.
template <typename Shape>
void check_shape(const char* what, const Shape& s) {
  if (shape_ok(s)) return;
  std::string sizes =
      std::string(what) + ": rows " + std::to_string(s.rows) + ", in " + std::to_string(s.in);
  if constexpr (std::is_same_v<Shape, LinearGeluShape>)
    sizes += ", hidden " + std::to_string(s.hidden);
  sizes += ", out " + std::to_string(s.out);
  throw std::invalid_argument(sizes + ": expected rows in [1, 2^31) and widths multiples of 8");
}

void check_pointers(const char* what,
                    std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, field] : pointers) {
    if (p == nullptr) throw std::invalid_argument(std::string(what) + ": " + field + " is null");
    if (reinterpret_cast<std::uintptr_t>(p) % kAlignment != 0)
      throw std::invalid_argument(std::string(what) + ": " + field + " is not 16-byte aligned");
  }
}

// cuBLASLt's workspace: 256-byte aligned (Transformer Engine refuses less).
void check_workspace(const char* what, const void* workspace, std::size_t bytes) {
  if (bytes > 0 && (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0))
    throw std::invalid_argument(std::string(what) +
                                ": workspace must be non-null and 256-byte aligned");
}

[[noreturn]] void no_backend(const char* what) {
  throw std::runtime_error(std::string(what) +
                           ": this build has no CUDA backend (configure with -DSACCADE_CUDA=ON)");
}

#ifdef SACCADE_KERNELS_CUDA

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt ") + what + ": " +
                             cublasLtGetStatusString(status));
}

// One handle per thread and device (a handle is bound to the device current at its creation).
cublasLtHandle_t handle_for(int device) {
  struct Handles {
    std::map<int, cublasLtHandle_t> by_device;
    ~Handles() {
      for (auto& [device, h] : by_device) cublasLtDestroy(h);
    }
  };
  thread_local Handles handles;
  const auto it = handles.by_device.find(device);
  if (it != handles.by_device.end()) return it->second;
  cublasLtHandle_t h = nullptr;  // kept only once created: a failed create leaves no handle
  check(cublasLtCreate(&h), "create");
  handles.by_device.emplace(device, h);
  return h;
}

// One product D = op(A) op(B) as cuBLASLt sees LibTorch's row-major matrices: a row-major
// [r, c] matrix is a column-major c x r one with leading dimension c. D is m x n with leading
// dimension m; A and B are given as stored (rows x columns, leading dimension = rows).
struct Spec {
  cudaDataType_t type = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  std::uint64_t a_rows = 0, a_cols = 0, b_rows = 0, b_cols = 0, m = 0, n = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  std::int64_t aux_ld = 0;  // 0: no auxiliary matrix
  // The algorithm depends on these fields (and the pointers' alignment, kAlignment).
  auto key() const {
    return std::tuple{static_cast<int>(type),
                      static_cast<int>(trans_a),
                      static_cast<int>(trans_b),
                      a_rows,
                      a_cols,
                      b_rows,
                      b_cols,
                      m,
                      n,
                      static_cast<int>(epilogue),
                      aux_ld};
  }
};

cudaDataType_t cuda_type(FloatType t) {
  return t == FloatType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The MLP's first product: D (hidden x rows) = W1 (stored in x hidden, transposed) x
// (in x rows), GELU_AUX_BIAS (aux: pre, hidden x rows) or without aux GELU_BIAS.
Spec gelu_forward(const LinearGeluShape& s, bool aux) {
  Spec p;
  p.type = cuda_type(s.type);
  p.trans_a = CUBLAS_OP_T;
  p.a_rows = s.in, p.a_cols = s.hidden, p.b_rows = s.in, p.b_cols = s.rows;
  p.m = s.hidden, p.n = s.rows;
  p.epilogue = aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
  p.aux_ld = aux ? s.hidden : 0;
  return p;
}

// Its gradient: D (hidden x rows) = W2 (stored hidden x out) dy (out x rows), DGELU_BGRAD
// (aux: pre; the bias gradient sums D over its columns: hidden values).
Spec gelu_backward(const LinearGeluShape& s) {
  Spec p;
  p.type = cuda_type(s.type);
  p.a_rows = s.hidden, p.a_cols = s.out, p.b_rows = s.out, p.b_cols = s.rows;
  p.m = s.hidden, p.n = s.rows;
  p.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
  p.aux_ld = s.hidden;
  return p;
}

// A weight gradient: D (in x out, i.e. row-major d_W [out, in]) = x (stored in x rows)
// dy (stored out x rows, transposed: rows x out), BGRADB (the bias gradient sums op(B) over
// the reduced dimension, rows: out values).
Spec weight_grad(const WeightGradShape& s) {
  Spec p;
  p.type = cuda_type(s.type);
  p.trans_b = CUBLAS_OP_T;
  p.a_rows = s.in, p.a_cols = s.rows, p.b_rows = s.out, p.b_cols = s.rows;
  p.m = s.in, p.n = s.out;
  p.epilogue = CUBLASLT_EPILOGUE_BGRADB;
  return p;
}

class Product {
 public:
  // bias: read (GELU_*BIAS) or written (*BGRAD*); aux: written (GELU_AUX) or read (DGELU).
  Product(const Spec& s, const void* bias, const void* aux) {
    try {
      check(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
      set(CUBLASLT_MATMUL_DESC_TRANSA, s.trans_a);
      set(CUBLASLT_MATMUL_DESC_TRANSB, s.trans_b);
      set(CUBLASLT_MATMUL_DESC_EPILOGUE, s.epilogue);
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
      if (s.aux_ld > 0) {
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, s.aux_ld);
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
      }
      check(cublasLtMatrixLayoutCreate(&a_, s.type, s.a_rows, s.a_cols, s.a_rows), "layout A");
      check(cublasLtMatrixLayoutCreate(&b_, s.type, s.b_rows, s.b_cols, s.b_rows), "layout B");
      check(cublasLtMatrixLayoutCreate(&d_, s.type, s.m, s.n, s.m), "layout D");
    } catch (...) {
      release();  // a constructor that throws runs no destructor
      throw;
    }
  }
  ~Product() { release(); }
  Product(const Product&) = delete;
  Product& operator=(const Product&) = delete;

  // The best algorithm for these descriptors with 16-byte aligned pointers; false: none.
  bool find_algorithm(cublasLtHandle_t h, std::size_t workspace_bytes,
                      cublasLtMatmulAlgo_t& algo) const {
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const std::uint64_t bytes = workspace_bytes;
    const std::uint32_t align = kAlignment;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes);
    for (const auto attribute :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (status == CUBLAS_STATUS_SUCCESS)
        status = cublasLtMatmulPreferenceSetAttribute(pref, attribute, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulAlgoGetHeuristic(h, op_, a_, b_, d_, d_, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found < 1) return false;
    algo = result.algo;
    return true;
  }

  void run(cublasLtHandle_t h, const cublasLtMatmulAlgo_t& algo, const void* a, const void* b,
           void* d, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasLtMatmul(h, op_, &alpha, a, a_, b, b_, &beta, d, d_, d, d_, &algo, workspace,
                         workspace_bytes, stream),
          "matmul");
  }

 private:
  void release() {
    if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
    if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
    if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
    if (op_ != nullptr) cublasLtMatmulDescDestroy(op_);
    d_ = b_ = a_ = nullptr;
    op_ = nullptr;
  }
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    check(cublasLtMatmulDescSetAttribute(op_, attribute, &value, sizeof value), "set attribute");
  }

  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
};

struct Algorithm {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

// The algorithm of each (device, product, workspace), found once per process: the support
// check on the forward's thread and the backward on LibTorch's autograd thread get the same
// answer (an algorithm is not bound to a handle). Asked with bias and auxiliary pointers
// set, as cuBLASLt's own examples do; the heuristic reads their alignment from their values,
// so it is asked with placeholders aligned to exactly kAlignment: what every call
// guarantees, whatever a first call's pointers happened to be. A query that fails counts as
// no algorithm (and is not asked again). Looked up before any descriptor is built: this runs
// at every call.
Algorithm algorithm_for(const Spec& spec, int device, std::size_t workspace_bytes) {
  using Key = decltype(std::tuple_cat(std::tuple{0, std::size_t{0}}, spec.key()));
  static std::mutex mutex;  // guards cache
  static std::map<Key, Algorithm> cache;
  const Key key = std::tuple_cat(std::tuple{device, workspace_bytes}, spec.key());
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    const auto* placeholder = reinterpret_cast<const void*>((std::uintptr_t{1} << 20) + kAlignment);
    Algorithm a;
    try {
      const Product product(spec, placeholder, placeholder);
      a.found = product.find_algorithm(handle_for(device), workspace_bytes, a.algo);
    } catch (const std::runtime_error&) {
      a.found = false;  // no descriptor or handle on this device: no algorithm
    }
    it = cache.emplace(key, a).first;
  }
  return it->second;
}

int current_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    throw std::runtime_error("linear epilogues: no current CUDA device");
  return device;
}

// Whether every product has an algorithm on `device` (made current for the question).
bool supported(std::initializer_list<Spec> specs, int device) {
  const cuda::DeviceScope scope(device, std::nothrow);
  if (!scope.ok()) return false;
  for (const Spec& spec : specs)
    if (!algorithm_for(spec, device, kEpilogueWorkspaceBytes).found) return false;
  return true;
}

void run_product(const Spec& spec, const void* a, const void* b, void* out, const void* bias,
                 const void* aux, void* workspace, std::size_t workspace_bytes, void* stream,
                 const char* what) {
  const int device = current_device();
  const Algorithm algorithm = algorithm_for(spec, device, workspace_bytes);
  if (!algorithm.found)
    throw std::runtime_error(std::string(what) + ": cuBLASLt has no algorithm for this shape (" +
                             std::to_string(spec.m) + " x " + std::to_string(spec.n) +
                             ") with this epilogue on this device");
  const Product product(spec, bias, aux);
  product.run(handle_for(device), algorithm.algo, a, b, out, workspace, workspace_bytes,
              static_cast<cudaStream_t>(stream));
}

#endif  // SACCADE_KERNELS_CUDA

}  // namespace

bool linear_gelu_cuda_supports(const LinearGeluShape& shape, int device) {
#ifdef SACCADE_KERNELS_CUDA
  return shape_ok(shape) &&
         supported({gelu_forward(shape, true), gelu_forward(shape, false), gelu_backward(shape)},
                   device);
#else
  (void)shape, (void)device;
  return false;
#endif
}

bool weight_grad_bias_cuda_supports(const WeightGradShape& shape, int device) {
#ifdef SACCADE_KERNELS_CUDA
  return shape_ok(shape) && supported({weight_grad(shape)}, device);
#else
  (void)shape, (void)device;
  return false;
#endif
}

void linear_gelu_forward_cuda(const LinearGeluShape& shape, const LinearGeluForward& f,
                              void* workspace, std::size_t workspace_bytes, void* stream) {
  constexpr const char* kWhat = "linear_gelu_forward_cuda";
  check_shape(kWhat, shape);
  check_pointers(kWhat, {{f.x, "x"}, {f.weight, "weight"}, {f.bias, "bias"}, {f.h, "h"}});
  if (reinterpret_cast<std::uintptr_t>(f.pre) % kAlignment != 0)
    throw std::invalid_argument(std::string(kWhat) + ": pre is not 16-byte aligned");
  check_workspace(kWhat, workspace, workspace_bytes);
#ifdef SACCADE_KERNELS_CUDA
  run_product(gelu_forward(shape, f.pre != nullptr), f.weight, f.x, f.h, f.bias, f.pre, workspace,
              workspace_bytes, stream, kWhat);
#else
  (void)stream;
  no_backend(kWhat);
#endif
}

void linear_gelu_backward_cuda(const LinearGeluShape& shape, const LinearGeluBackward& b,
                               void* workspace, std::size_t workspace_bytes, void* stream) {
  constexpr const char* kWhat = "linear_gelu_backward_cuda";
  check_shape(kWhat, shape);
  check_pointers(kWhat, {{b.dy, "dy"},
                         {b.weight, "weight"},
                         {b.pre, "pre"},
                         {b.d_pre, "d_pre"},
                         {b.d_bias, "d_bias"}});
  check_workspace(kWhat, workspace, workspace_bytes);
#ifdef SACCADE_KERNELS_CUDA
  run_product(gelu_backward(shape), b.weight, b.dy, b.d_pre, b.d_bias, b.pre, workspace,
              workspace_bytes, stream, kWhat);
#else
  (void)stream;
  no_backend(kWhat);
#endif
}

void weight_grad_bias_cuda(const WeightGradShape& shape, const WeightGradBias& g, void* workspace,
                           std::size_t workspace_bytes, void* stream) {
  constexpr const char* kWhat = "weight_grad_bias_cuda";
  check_shape(kWhat, shape);
  check_pointers(kWhat, {{g.dy, "dy"}, {g.x, "x"}, {g.d_weight, "d_weight"}, {g.d_bias, "d_bias"}});
  check_workspace(kWhat, workspace, workspace_bytes);
#ifdef SACCADE_KERNELS_CUDA
  run_product(weight_grad(shape), g.x, g.dy, g.d_weight, g.d_bias, nullptr, workspace,
              workspace_bytes, stream, kWhat);
#else
  (void)stream;
  no_backend(kWhat);
#endif
}

}  // namespace saccade::kernels
