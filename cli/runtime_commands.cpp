// saccade coordinator | agent | actor | status | run | keys: the distributed runtime.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/torch_commands.h"
#include "common/allocation.h"
#include "common/config.h"
#include "common/logging.h"
#include "control/control.h"
#include "coordinator/agent.h"
#include "coordinator/coordinator.h"
#include "coordinator/local_run.h"
#include "coordinator/status.h"
#include "workers/data_plane/data_actor.h"
#include "workers/job_options/remote_batch_options.h"
#include "workers/runtime/actor_runtime.h"

namespace saccade::cli {
namespace {

// The config as this launch runs it: nodes and ports from the allocation
// (common/allocation.h). A refused config exits 2 before anything starts, and so does one
// whose learners could not receive their batches (job_options::learner_frame_problem).
JobConfig load_or_exit(const std::string& file) {
  JobConfig c;
  try {
    c = resolve_allocation(load_config(file), Allocation::from_environment());
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}: {}\n", file, e.what());
    throw Exit{2};
  }
  if (const std::string frames = job_options::learner_frame_problem(c); !frames.empty()) {
    fmt::print(stderr, "{}: {}\n", file, frames);
    throw Exit{2};
  }
  return c;
}

void start_logging(const GlobalOptions& g, const std::string& role, const JobConfig& c) {
  init_logging({role, 0, g.log_level.empty() ? c.logging.level : g.log_level,
                g.log_dir.empty() ? c.logging.dir : g.log_dir});
}

constexpr const char* kLaunchHelp =
    "This launch's identity; peers of another launch are refused (default: $SACCADE_LAUNCH, "
    "else slurm-$SLURM_JOB_ID";

void add_coordinator(CLI::App& app, GlobalOptions& global) {
  static std::string file, launch;
  static coordinator::CoordinatorOptions options;
  CLI::App* cmd = app.add_subcommand("coordinator", "Run (or resume) a job's coordinator");
  cmd->add_option("CONFIG", file, "Job config (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--bind", options.bind_host,
                  "Interface of the control and metrics sockets: an address, a host name or * "
                  "for every interface (default: cluster.coordinator_host)");
  cmd->add_flag("--fresh", options.fresh,
                "Delete the job's database and checkpoints under job.work_dir and start over "
                "(default: resume a drained or failed job; a finished one stays finished)");
  cmd->add_option("--launch", launch, std::string(kLaunchHelp) + ", else a fresh token)");
  cmd->callback([&global] {
    const JobConfig c = load_or_exit(file);
    start_logging(global, "coordinator", c);
    spdlog::info("launch {}", control::resolve_launch(launch, true));
    const int code = coordinator::run_coordinator(c, options);
    if (code != 0) throw Exit{code};
  });
}

void add_agent(CLI::App& app, GlobalOptions& global) {
  static coordinator::AgentOptions options;
  static std::string config_file, job, launch;
  CLI::App* cmd = app.add_subcommand("agent", "Run a node agent: starts and watches actors");
  cmd->add_option("--coordinator", options.coordinator, "Coordinator HOST:PORT")->required();
  cmd->add_option("--node", options.node, "This node's name in [[cluster.nodes]]")->required();
  cmd->add_option("--actor-binary", options.actor_binary,
                  "Executable run as `BINARY actor ...` (default: this one)");
  cmd->add_option("--config", config_file,
                  "Job config: job name and [security] keys until the coordinator sends its own")
      ->check(CLI::ExistingFile);
  cmd->add_option("--job", job, "Job name when no --config is given (default: saccade)");
  cmd->add_option("--launch", launch,
                  std::string(kLaunchHelp) + ", else none: any launch of the job)");
  cmd->callback([&global] {
    options.bootstrap = config_file.empty() ? default_config() : load_or_exit(config_file);
    if (!job.empty()) options.bootstrap.job.name = job;
    init_logging({"agent", 0,
                  global.log_level.empty() ? options.bootstrap.logging.level : global.log_level,
                  global.log_dir});
    const std::string mine = control::resolve_launch(launch, false);
    spdlog::info("launch {}", mine.empty() ? "(any)" : mine);
    const int code = coordinator::run_agent(options);
    if (code != 0) throw Exit{code};
  });
}

void add_status(CLI::App& app, GlobalOptions&) {
  static std::string coordinator, config_file, job;
  static bool watch = false, json = false;
  static int timeout_ms = 3000, interval_ms = 1000;
  CLI::App* cmd = app.add_subcommand("status", "Show a job's progress and its actors");
  cmd->add_option("--coordinator", coordinator,
                  "Coordinator HOST:PORT (default: the config's coordinator_host:port)");
  cmd->add_option("--config", config_file, "Job config: job name and [security] keys")
      ->check(CLI::ExistingFile);
  cmd->add_option("--job", job, "Job name when no --config is given (default: saccade)");
  cmd->add_flag("--watch", watch, "Refresh until interrupted");
  cmd->add_flag("--json", json, "One JSON object per reply, for scripts");
  cmd->add_option("--timeout-ms", timeout_ms, "Wait this long for a reply")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--interval-ms", interval_ms, "Refresh period of --watch")
      ->check(CLI::PositiveNumber);
  cmd->callback([] {
    // Outside the job's allocation (a login node), nodes_from = "slurm" cannot be resolved:
    // give --coordinator HOST:PORT then.
    JobConfig c = default_config();
    if (!config_file.empty()) {
      try {
        c = load_config(config_file);
        c = resolve_allocation(c, Allocation::from_environment());
      } catch (const ConfigError& e) {
        if (c.cluster.nodes_from != "slurm" || coordinator.empty()) {
          fmt::print(stderr, "{}: {}\n", config_file, e.what());
          throw Exit{2};
        }
      }
    }
    if (!job.empty()) c.job.name = job;
    init_logging({"status", 0, "warn", ""});
    const std::string address =
        coordinator.empty()
            ? fmt::format("{}:{}", c.cluster.coordinator_host, c.cluster.coordinator_port)
            : coordinator;
    const std::string endpoint = control::tcp_endpoint(address, "--coordinator");
    const control::Security security = control::load_security(c.security, false);
    // With neither --job nor --config, the job is whichever the coordinator runs: its
    // Refusal of the default name says which, and the request is made again under it.
    const bool any_job = job.empty() && config_file.empty();
    for (;;) {
      std::string why, running;
      auto s = coordinator::query_status(endpoint, c, security,
                                         std::chrono::milliseconds(timeout_ms), why, &running);
      if (!s && any_job && !running.empty() && running != c.job.name) {
        c.job.name = running;
        s = coordinator::query_status(endpoint, c, security, std::chrono::milliseconds(timeout_ms),
                                      why);
      }
      if (!s) {
        fmt::print(stderr, "saccade status: {}\n", why);
        if (!watch) throw Exit{1};
      } else {
        if (watch && !json && isatty(STDOUT_FILENO)) fmt::print("\033[H\033[2J");
        fmt::print("{}", json ? coordinator::status_json(*s) : coordinator::status_table(*s));
        std::fflush(stdout);
      }
      if (!watch) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
  });
}

void add_run(CLI::App& app, GlobalOptions& global) {
  static coordinator::LocalRunOptions options;
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a job on this machine: coordinator plus one agent per node, on loopback");
  cmd->add_option("CONFIG", options.config_file, "Job config (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--actor-binary", options.actor_binary,
                  "Executable run as `BINARY actor ...` (default: this one)");
  cmd->add_flag("--fresh", options.fresh,
                "Delete the job's database and checkpoints under job.work_dir and start over "
                "(default: resume a drained or failed job; a finished one stays finished)");
  cmd->callback([&global] {
    const JobConfig c = load_or_exit(options.config_file);
    start_logging(global, "run", c);
    options.log_level = global.log_level;
    const int code = coordinator::run_local(options);
    if (code != 0) throw Exit{code};
  });
}

void add_keys(CLI::App& app, GlobalOptions&) {
  static std::string dir;
  CLI::App* keys = app.add_subcommand("keys", "CURVE keys of a job");
  keys->require_subcommand(1);
  CLI::App* generate =
      keys->add_subcommand("generate", "Write DIR/server.key, server.pub, client.key, client.pub");
  generate->add_option("DIR", dir, "Folder for the key files")->required();
  generate->callback([] {
    control::write_key_files(dir);
    fmt::print(
        "wrote {0}/server.key {0}/server.pub {0}/client.key {0}/client.pub\n"
        "[security]\ncurve = true\nserver_key = \"{0}/server.key\"\n"
        "server_public_key = \"{0}/server.pub\"\nclient_key = \"{0}/client.key\"\n",
        dir);
  });
}

}  // namespace

// A body built into libsaccade_torch.so, loaded when an actor of its role starts.
static std::unique_ptr<runtime::ActorBody> torch_body(wire::Role role) {
  auto* make =
      reinterpret_cast<runtime::ActorBody* (*)(int)>(torch_entry("saccade_torch_make_body"));
  std::unique_ptr<runtime::ActorBody> body(make(static_cast<int>(role)));
  if (!body) throw std::runtime_error("libsaccade_torch.so has no body for this role");
  return body;
}

void add_runtime_commands(CLI::App& app, GlobalOptions& global) {
  add_coordinator(app, global);
  add_agent(app, global);
  // Data actors are torch-free and start in milliseconds; learners load torch.
  runtime::ActorBodies bodies = {
      {wire::Role::DATA, [] { return data_plane::make_data_actor(); }},
      {wire::Role::LEARNER, [] { return torch_body(wire::Role::LEARNER); }},
      {wire::Role::ROLLOUT, [] { return torch_body(wire::Role::ROLLOUT); }},
      {wire::Role::EVAL, [] { return torch_body(wire::Role::EVAL); }},
  };
  runtime::add_actor_command(app, std::move(bodies), [](int code) {
    if (code != 0) throw Exit{code};
  });
  add_status(app, global);
  add_run(app, global);
  add_keys(app, global);
}

}  // namespace saccade::cli
