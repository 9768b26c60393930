// saccade info: what this binary was built with.
#include <fmt/format.h>

#include <cstdlib>

#include "cli/build_info.h"
#include "cli/commands.h"
#include "common/openblas_core.h"

namespace saccade::cli {

void add_info_command(CLI::App& app, GlobalOptions&) {
  CLI::App* info =
      app.add_subcommand("info", "Print how this binary was built (backends, versions)");
  info->callback([] {
    namespace b = build_info;
    fmt::print("saccade {} ({})\n", b::kVersion, b::kBuildType);
    fmt::print("LibTorch {} (CUDA in torch: {})\n", b::kTorchVersion,
               b::kTorchHasCuda ? "yes" : "no");
    fmt::print("backend: {}\n", b::kCudaKernels
                                    ? fmt::format("CUDA kernels (arch {}), NCCL {}",
                                                  b::kCudaArchitectures, b::kNccl ? "on" : "off")
                                    : std::string("CPU"));
    const std::string core = openblas_core();
    const char* detected = std::getenv("SACCADE_OPENBLAS_DETECTED");
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    fmt::print("OpenBLAS core: {}\n",
               core.empty() ? std::string("none (not loaded)")
               : detected   ? fmt::format("{} (OPENBLAS_CORETYPE set by saccade: OpenBLAS took "
                                            "this CPU for {})",
                                          core, detected)
               : coretype   ? fmt::format("{} (OPENBLAS_CORETYPE={})", core, coretype)
                            : fmt::format("{} (chosen by OpenBLAS)", core));
  });
}

}  // namespace saccade::cli
