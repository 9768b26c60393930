#include "common/device_peak.h"

#include <dlfcn.h>

#include <array>
#include <cstdlib>

namespace saccade {
namespace {

struct PeakRow {
  const char* name_part;  // matched as a substring of the driver's name, first match wins
  double bf16;            // dense tensor-core TFLOP/s
  double fp32;            // FP32 (non-tensor) TFLOP/s
};

// NVIDIA data sheets (H100: "NVIDIA H100 Tensor Core GPU" datasheet; H200: "NVIDIA H200
// Tensor Core GPU" datasheet; A100: "NVIDIA A100 Tensor Core GPU" datasheet). Their
// tensor figures are quoted with sparsity; dense is half of them.
constexpr std::array<PeakRow, 7> kPeaks{{
    {"GH200", 989.4, 66.9},  // before "H200", which its name contains
    {"H100 PCIe", 756.5, 51.2},
    {"H100 NVL", 835.5, 60.0},
    {"H100", 989.4, 66.9},  // SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    {"H200 NVL", 835.5, 60.0},
    {"H200", 989.4, 66.9},  // SXM (e.g. "NVIDIA H200")
    {"A100", 312.0, 19.5},
}};

}  // namespace

std::string cuda_device_name(int index) {
  // The driver API, resolved at run time: no link dependency on CUDA.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return "";
  using Init = int (*)(unsigned);
  using Get = int (*)(int*, int);
  using GetName = int (*)(char*, int, int);
  const auto init = reinterpret_cast<Init>(::dlsym(lib, "cuInit"));
  const auto get = reinterpret_cast<Get>(::dlsym(lib, "cuDeviceGet"));
  const auto get_name = reinterpret_cast<GetName>(::dlsym(lib, "cuDeviceGetName"));
  std::string name;
  int device = 0;
  std::array<char, 256> buffer{};
  if (init && get && get_name && init(0) == 0 && get(&device, index) == 0 &&
      get_name(buffer.data(), static_cast<int>(buffer.size()), device) == 0)
    name = buffer.data();
  ::dlclose(lib);
  return name;
}

double table_peak_tflops(const std::string& device_name, const std::string& precision) {
  for (const PeakRow& row : kPeaks) {
    if (device_name.find(row.name_part) != std::string::npos)
      return precision.rfind("bf16", 0) == 0 ? row.bf16 : row.fp32;  // bf16, bf16-params
  }
  return 0;
}

double resolve_peak_tflops(double configured, const std::string& device,
                           const std::string& precision) {
  if (configured > 0) return configured;
  if (device.rfind("cuda", 0) != 0) return 0;
  const size_t colon = device.find(':');
  const int index = colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
  return table_peak_tflops(cuda_device_name(index), precision);
}

}  // namespace saccade
