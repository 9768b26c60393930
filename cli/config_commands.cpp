// saccade config check|show|docs
#include <fmt/format.h>
#include <cstdio>

#include "cli/commands.h"
#include "common/allocation.h"
#include "common/config.h"
#include "workers/job_options/remote_batch_options.h"

namespace saccade::cli {
void add_config_commands(CLI::App& app, GlobalOptions&) {
  CLI::App* config = app.add_subcommand("config", "Check, show and document job configs");
  config->require_subcommand(1);

  static std::vector<std::string> check_files;
  CLI::App* check =
      config->add_subcommand("check", "Validate config files; exit 2 if any is refused");
  check->add_option("FILE", check_files, "Job config (TOML)")->required()->check(CLI::ExistingFile);
  check->callback([] {
    int refused = 0;
    for (const std::string& file : check_files) {
      try {
        const JobConfig c = load_config(file);
        if (const std::string frames = job_options::learner_frame_problem(c); !frames.empty()) {
          fmt::print(stderr, "{}: {}\n", file, frames);
          ++refused;
          continue;
        }
        fmt::print(
            "{}: ok: job \"{}\", {} node(s), {} learner(s), {} data actor(s), {} rollout actor(s), "
            "{} eval actor(s); model depth {} width {} heads {}\n",
            file, c.job.name, c.cluster.nodes.size(), c.cluster.total(&NodeSpec::learners),
            c.cluster.total(&NodeSpec::data_actors), c.cluster.total(&NodeSpec::rollout_actors),
            c.cluster.total(&NodeSpec::eval_actors), c.model.depth, c.model.width, c.model.heads);
      } catch (const ConfigError& e) {
        fmt::print(stderr, "{}\n", e.what());
        ++refused;
      }
    }
    if (refused) throw Exit{2};
  });

  static std::string show_file;
  static bool show_allocation = false;
  CLI::App* show =
      config->add_subcommand("show", "Print the resolved config (every key, defaults filled in)");
  show->add_option("FILE", show_file, "Job config (TOML)")->required()->check(CLI::ExistingFile);
  show->add_flag("--allocation", show_allocation,
                 "As this launch runs it: nodes and ports from the Slurm allocation "
                 "(cluster.nodes_from, cluster.ports_per_job)");
  show->callback([] {
    try {
      const JobConfig c = load_config(show_file);
      fmt::print(
          "{}",
          to_toml(show_allocation ? resolve_allocation(c, Allocation::from_environment()) : c));
    } catch (const ConfigError& e) {
      fmt::print(stderr, "{}\n", e.what());
      throw Exit{2};
    }
  });

  CLI::App* docs =
      config->add_subcommand("docs", "Print the markdown reference of every key (docs/config.md)");
  docs->callback([] { fmt::print("{}", config_reference_markdown()); });
}

}  // namespace saccade::cli
