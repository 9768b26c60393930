// One way to time a span: seconds elapsed on the steady clock.
#pragma once

#include <chrono>

namespace saccade {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace saccade
