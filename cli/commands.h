// The saccade command line: one registration function per command group, each
// in its own file, all attached to the root CLI11 app by cli/main.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace saccade::cli {

// Options every command shares (log level, log folder).
struct GlobalOptions {
  std::string log_level;  // empty: the config's logging.level, or "info"
  std::string log_dir;
};

void add_config_commands(CLI::App& app, GlobalOptions& global);
void add_info_command(CLI::App& app, GlobalOptions& global);
void add_bench_commands(CLI::App& app, GlobalOptions& global);
void add_pretrain_command(CLI::App& app, GlobalOptions& global);
// data pack (cli/data_commands.cpp).
void add_data_commands(CLI::App& app, GlobalOptions& global);
// coordinator, agent, actor, status, run, keys (cli/runtime_commands.cpp).
void add_runtime_commands(CLI::App& app, GlobalOptions& global);

// Thrown by a command to end the process with this exit code after its
// message has been printed (CLI11 prints nothing more).
struct Exit {
  int code;
};

}  // namespace saccade::cli
