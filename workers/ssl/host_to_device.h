// Small host arrays to the device without waiting for it.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace saccade::ssl {

// A small host array as a 1-d tensor on `device`, without waiting for the device: on a GPU
// through page-locked memory and a non-blocking copy (a plain .to(device) waits until the
// stream has run everything queued before it).
template <class T>
torch::Tensor host_to_device(const std::vector<T>& values, const torch::Device& device) {
  torch::Tensor host = torch::tensor(values);
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace saccade::ssl
