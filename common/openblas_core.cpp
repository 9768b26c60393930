#include "common/openblas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

namespace saccade {

std::string openblas_core() {
  // Looked up at run time: this library does not link OpenBLAS (OpenCV and LibTorch do).
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = core_name ? core_name() : nullptr;
  return name ? name : "";
}

std::string openblas_core_fix() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  // OpenBLAS's cores without AVX kernels (its dynamic-architecture list).
  static const std::set<std::string> kWithoutAvx = {
      "Unknown", "Katmai",       "Coppermine", "Northwood", "Prescott",
      "Banias",  "Atom",         "Core2",      "Penryn",    "Dunnington",
      "Nehalem", "Opteron_SSE3", "Opteron",    "Barcelona", "Nano"};
  const std::string core = openblas_core();
  if (core.empty() || !kWithoutAvx.count(core)) return "";
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
  return "";
}

void reexec_with_openblas_core_fix(char** argv) {
  const std::string fix = openblas_core_fix();
  if (fix.empty()) return;
  ::setenv("SACCADE_OPENBLAS_DETECTED", openblas_core().c_str(), 1);
  ::setenv("OPENBLAS_CORETYPE", fix.c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on as we are
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv("SACCADE_OPENBLAS_DETECTED");
}

}  // namespace saccade
