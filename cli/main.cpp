// saccade: pretrains and runs image-size-agnostic foveal vision transformers.
#include <cstdio>

#include "cli/commands.h"
#include "common/openblas_core.h"

int main(int argc, char** argv) {
  // Before anything starts: OpenBLAS's generic kernels on a CPU it does not know are ~3x slower.
  saccade::reexec_with_openblas_core_fix(argv);
  CLI::App app{"saccade: foveal vision transformers, pretrained and run at cluster scale"};
  app.require_subcommand(1);
  saccade::cli::GlobalOptions global;
  app.add_option("--log-level", global.log_level,
                 "trace, debug, info, warn, error, critical or off");
  app.add_option("--log-dir", global.log_dir, "Also write logs to DIR/ROLE-RANK.log");
  saccade::cli::add_config_commands(app, global);
  saccade::cli::add_info_command(app, global);
  saccade::cli::add_bench_commands(app, global);
  saccade::cli::add_pretrain_command(app, global);
  saccade::cli::add_data_commands(app, global);
  saccade::cli::add_runtime_commands(app, global);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const saccade::cli::Exit& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "saccade: %s\n", e.what());
    return 1;
  }
  return 0;
}
