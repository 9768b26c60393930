#include "kernels/linear_gelu.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#ifdef SACCADE_KERNELS_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <tuple>
#endif

namespace saccade::kernels {
namespace {

constexpr std::size_t kAlignment = 16;  // of every pointer: what the cached algorithms assume

bool shape_ok(const LinearGeluShape& s) {
  return s.rows >= 1 && s.in >= 1 && s.hidden >= 1 && s.out >= 1 && s.in % 8 == 0 &&
         s.hidden % 8 == 0 && s.out % 8 == 0 && s.rows <= INT32_MAX;
}

void check_call(const LinearGeluShape& s, const char* what,
                std::initializer_list<std::pair<const void*, const char*>> pointers) {
  if (!shape_ok(s))
    throw std::invalid_argument(std::string(what) + ": rows " + std::to_string(s.rows) + ", in " +
                                std::to_string(s.in) + ", hidden " + std::to_string(s.hidden) +
                                ", out " + std::to_string(s.out) +
                                ": expected rows in [1, 2^31) and widths multiples of 8");
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

#ifdef SACCADE_KERNELS_CUDA

// kInference: forward without the pre-activation (GELU_BIAS, nothing saved for backward).
enum class Direction { kForward, kInference, kBackward };

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
  cublasLtHandle_t& h = handles.by_device[device];
  if (h == nullptr) check(cublasLtCreate(&h), "create");
  return h;
}

// The descriptors of one product (column-major, as cuBLASLt sees LibTorch's row-major
// matrices: a row-major [r, c] matrix is a column-major c x r one with leading dimension c).
// m = hidden (D's rows), n = rows, k = in (forward) or out (backward).
//   forward:  D = op_T(W1: in x hidden) * (x: in x rows),      epilogue GELU_AUX_BIAS
//   backward: D = (W2: hidden x out) * (dy: out x rows),       epilogue DGELU_BGRAD
// D and the auxiliary pre-activation are hidden x rows with leading dimension hidden.
class Product {
 public:
  // bias: b1 (forward) or d_b1 (backward); aux: pre, written (forward) or read (backward).
  Product(const LinearGeluShape& s, Direction d, const void* bias, const void* aux) {
    const cudaDataType_t t = s.type == FloatType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
    const std::uint64_t m = static_cast<std::uint64_t>(s.hidden);
    const std::uint64_t n = static_cast<std::uint64_t>(s.rows);
    const bool forward = d != Direction::kBackward;
    const std::uint64_t k = static_cast<std::uint64_t>(forward ? s.in : s.out);
    check(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    const cublasOperation_t trans_a = forward ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, trans_a);
    const cublasLtEpilogue_t epilogue = d == Direction::kForward ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                        : d == Direction::kInference
                                            ? CUBLASLT_EPILOGUE_GELU_BIAS
                                            : CUBLASLT_EPILOGUE_DGELU_BGRAD;
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (d != Direction::kInference) {
      const std::int64_t aux_ld = s.hidden;
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    }
    if (forward)
      check(cublasLtMatrixLayoutCreate(&a_, t, k, m, k), "layout A");  // W1^T stored: in x hidden
    else
      check(cublasLtMatrixLayoutCreate(&a_, t, m, k, m), "layout A");  // W2 stored: hidden x out
    check(cublasLtMatrixLayoutCreate(&b_, t, k, n, k), "layout B");
    check(cublasLtMatrixLayoutCreate(&d_, t, m, n, m), "layout D");
  }
  ~Product() {
    if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
    if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
    if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
    if (op_ != nullptr) cublasLtMatmulDescDestroy(op_);
  }
  Product(const Product&) = delete;
  Product& operator=(const Product&) = delete;

  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    check(cublasLtMatmulDescSetAttribute(op_, attribute, &value, sizeof value), "set attribute");
  }

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
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
};

// The algorithm of each (device, shape, direction, workspace), found once per thread.
struct Algorithm {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

// The algorithm is asked for with bias and auxiliary pointers set, as cuBLASLt's own examples
// do; the heuristic reads their alignment from their values, so it is asked with placeholders
// aligned to exactly kAlignment: what every call guarantees, whatever a first call's pointers
// happened to be. Looked up before any descriptor is built: this runs at every MLP call.
const Algorithm& algorithm_for(const LinearGeluShape& s, Direction d, int device,
                               std::size_t workspace_bytes) {
  using Key = std::tuple<int, std::int64_t, int, int, int, int, int, std::size_t>;
  thread_local std::map<Key, Algorithm> cache;
  const Key key{
      device,         s.rows, s.in, s.hidden, s.out, static_cast<int>(s.type), static_cast<int>(d),
      workspace_bytes};
  auto it = cache.find(key);
  if (it == cache.end()) {
    const auto* placeholder = reinterpret_cast<const void*>((std::uintptr_t{1} << 20) + kAlignment);
    const Product product(s, d, placeholder, placeholder);
    Algorithm a;
    a.found = product.find_algorithm(handle_for(device), workspace_bytes, a.algo);
    it = cache.emplace(key, a).first;
  }
  return it->second;
}

int current_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    throw std::runtime_error("linear_gelu: no current CUDA device");
  return device;
}

void run_product(const LinearGeluShape& s, Direction d, const void* a, const void* b, void* out,
                 const void* bias, const void* aux, void* workspace, std::size_t workspace_bytes,
                 void* stream, const char* what) {
  const int device = current_device();
  const Algorithm& algorithm = algorithm_for(s, d, device, workspace_bytes);
  if (!algorithm.found)
    throw std::runtime_error(std::string(what) + ": cuBLASLt has no algorithm for rows " +
                             std::to_string(s.rows) + ", in " + std::to_string(s.in) + ", hidden " +
                             std::to_string(s.hidden) + ", out " + std::to_string(s.out) +
                             " with this epilogue on this device");
  const Product product(s, d, bias, aux);
  product.run(handle_for(device), algorithm.algo, a, b, out, workspace, workspace_bytes,
              static_cast<cudaStream_t>(stream));
}

#endif  // SACCADE_KERNELS_CUDA

}  // namespace

bool linear_gelu_cuda_supports(const LinearGeluShape& shape, int device) {
#ifdef SACCADE_KERNELS_CUDA
  if (!shape_ok(shape)) return false;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return false;
  if (previous != device && cudaSetDevice(device) != cudaSuccess) return false;
  bool ok = false;
  try {
    ok = true;
    for (const Direction d : {Direction::kForward, Direction::kInference, Direction::kBackward})
      ok = ok && algorithm_for(shape, d, device, kLinearGeluWorkspaceBytes).found;
  } catch (const std::runtime_error&) {
    ok = false;  // no cuBLASLt handle on this device: not supported
  }
  if (previous != device) cudaSetDevice(previous);
  return ok;
#else
  (void)shape, (void)device;
  return false;
#endif
}

void linear_gelu_forward_cuda(const LinearGeluShape& shape, const LinearGeluForward& f,
                              void* workspace, std::size_t workspace_bytes, void* stream) {
  check_call(shape, "linear_gelu_forward_cuda",
             {{f.x, "x"}, {f.weight, "weight"}, {f.bias, "bias"}, {f.h, "h"}});
  if (reinterpret_cast<std::uintptr_t>(f.pre) % kAlignment != 0)
    throw std::invalid_argument("linear_gelu_forward_cuda: pre is not 16-byte aligned");
  check_workspace("linear_gelu_forward_cuda", workspace, workspace_bytes);
#ifdef SACCADE_KERNELS_CUDA
  run_product(shape, f.pre != nullptr ? Direction::kForward : Direction::kInference, f.weight, f.x,
              f.h, f.bias, f.pre, workspace, workspace_bytes, stream, "linear_gelu_forward_cuda");
#else
  (void)workspace, (void)workspace_bytes, (void)stream;
  throw std::runtime_error(
      "linear_gelu_forward_cuda: this build has no CUDA backend (configure with "
      "-DSACCADE_CUDA=ON)");
#endif
}

void linear_gelu_backward_cuda(const LinearGeluShape& shape, const LinearGeluBackward& b,
                               void* workspace, std::size_t workspace_bytes, void* stream) {
  check_call(shape, "linear_gelu_backward_cuda",
             {{b.dy, "dy"},
              {b.weight, "weight"},
              {b.pre, "pre"},
              {b.d_pre, "d_pre"},
              {b.d_bias, "d_bias"}});
  check_workspace("linear_gelu_backward_cuda", workspace, workspace_bytes);
#ifdef SACCADE_KERNELS_CUDA
  run_product(shape, Direction::kBackward, b.weight, b.dy, b.d_pre, b.d_bias, b.pre, workspace,
              workspace_bytes, stream, "linear_gelu_backward_cuda");
#else
  (void)workspace, (void)workspace_bytes, (void)stream;
  throw std::runtime_error(
      "linear_gelu_backward_cuda: this build has no CUDA backend (configure with "
      "-DSACCADE_CUDA=ON)");
#endif
}

}  // namespace saccade::kernels
