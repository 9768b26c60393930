// saccade info: what this binary was built with.
#include <fmt/format.h>

#include "cli/build_info.h"
#include "cli/commands.h"

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
  });
}

}  // namespace saccade::cli
