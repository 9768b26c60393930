// Makes a CUDA device the calling thread's current one for a scope and restores the caller's
// on the way out, so that a call into the kernels leaves the thread as it found it (a learner
// on cuda:1 must not find its thread moved to another device by a cut). Host code only, CUDA
// builds only (SACCADE_KERNELS_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <stdexcept>
#include <string>

namespace saccade::kernels::cuda {

class DeviceScope {
 public:
  // Throws std::runtime_error naming `device` when it cannot be made current.
  explicit DeviceScope(int device) {
    if (!enter(device))
      throw std::runtime_error("CUDA cudaSetDevice(" + std::to_string(device) +
                               "): " + cudaGetErrorString(cudaGetLastError()));
  }
  // For destructors and queries: a device that cannot be made current leaves it as it is
  // (ok() says so).
  DeviceScope(int device, std::nothrow_t) { ok_ = enter(device); }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  bool ok() const { return ok_; }

 private:
  bool enter(int device) {
    device_ = device;
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) return true;
    return cudaSetDevice(device) == cudaSuccess;
  }

  int previous_ = -1;  // the caller's current device; -1: none could be read
  int device_ = -1;
  bool ok_ = true;
};

}  // namespace saccade::kernels::cuda
