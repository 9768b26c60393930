// saccade pretrain CONFIG: sequential-to-global DINO in one process.
// saccade export CONFIG: the teacher backbone of a committed checkpoint as safetensors.
// saccade probe CONFIG: a linear task head on that frozen backbone.
// saccade policy CONFIG: the gaze policy, GRPO against the frozen backbone and head.
// saccade eval CONFIG: every mode per glimpse and the resolution sweep on the frozen models.
#include "cli/commands.h"
#include "cli/torch_commands.h"

namespace saccade::cli {

void add_pretrain_command(CLI::App& app, GlobalOptions& global) {
  static std::string file;
  static PretrainArgs args;
  CLI::App* cmd = app.add_subcommand(
      "pretrain",
      "Sequential-to-global DINO pretraining in one process (resumes from the last checkpoint)");
  cmd->add_option("CONFIG", file, "Job config (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--steps", args.steps,
                  "Stop after this many optimiser steps in total (default: the config's epochs)");
  cmd->add_flag("--fresh", args.fresh, "Ignore existing checkpoints and start from step 0");
  cmd->callback([&global] {
    args.config_path = file.c_str();
    args.log_level = global.log_level.c_str();
    args.log_dir = global.log_dir.c_str();
    auto* entry =
        reinterpret_cast<int (*)(const PretrainArgs*)>(torch_entry("saccade_torch_pretrain"));
    if (const int rc = entry(&args); rc != 0) throw Exit{rc};
  });

  static std::string export_file, export_out;
  static ExportArgs export_args;
  CLI::App* exp = app.add_subcommand(
      "export", "Write the teacher backbone of a committed checkpoint as safetensors");
  exp->add_option("CONFIG", export_file, "Job config (TOML)")->required()->check(CLI::ExistingFile);
  exp->add_option("--step", export_args.step, "Checkpoint step (default: the newest)");
  exp->add_option("--out", export_out, "Output file (default: job.work_dir/backbone.safetensors)");
  exp->callback([] {
    export_args.config_path = export_file.c_str();
    export_args.out = export_out.c_str();
    auto* entry = reinterpret_cast<int (*)(const ExportArgs*)>(torch_entry("saccade_torch_export"));
    if (const int rc = entry(&export_args); rc != 0) throw Exit{rc};
  });

  static std::string probe_file;
  static ProbeArgs probe_args;
  CLI::App* probe = app.add_subcommand(
      "probe",
      "Score the frozen teacher of a checkpoint with k-NN and a linear probe in ViT mode and "
      "after every random glimpse, beside the baselines of probe.baselines (config [probe]), "
      "and write the task head");
  probe->add_option("CONFIG", probe_file, "Job config (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  probe->add_option("--step", probe_args.step, "Checkpoint step (default: the newest)");
  static std::string probe_init = "checkpoint";
  probe
      ->add_option("--init", probe_init,
                   "checkpoint: the teacher of a checkpoint; random: the backbone's initial "
                   "weights (job.seed), no checkpoint needed, no head written")
      ->check(CLI::IsMember({"checkpoint", "random"}));
  static std::string probe_backbone;
  probe
      ->add_option("--backbone", probe_backbone,
                   "Probe this backbone file (`saccade export`, or pretrain's "
                   "backbone.safetensors) instead of a checkpoint; the head it writes names "
                   "the file, which the policy and eval then read")
      ->check(CLI::ExistingFile)
      ->excludes("--step");
  probe->add_option("--max-train-images", probe_args.max_train_images,
                    "Use the first N training images (default: probe.train_images)");
  probe->add_option("--max-val-images", probe_args.max_val_images,
                    "Use the first N validation images (default: probe.val_images)");
  probe->callback([&global] {
    probe_args.random_init = probe_init == "random";
    if (probe_args.random_init && !probe_backbone.empty())
      throw CLI::ValidationError("--backbone", "cannot be combined with --init random");
    probe_args.backbone_path = probe_backbone.c_str();
    probe_args.config_path = probe_file.c_str();
    probe_args.log_level = global.log_level.c_str();
    auto* entry = reinterpret_cast<int (*)(const ProbeArgs*)>(torch_entry("saccade_torch_probe"));
    if (const int rc = entry(&probe_args); rc != 0) throw Exit{rc};
  });

  static std::string policy_file;
  static PolicyArgs policy_args;
  CLI::App* policy = app.add_subcommand(
      "policy",
      "Train the gaze policy with GRPO against the frozen backbone and the probe's head "
      "(config [policy]) and compare it with random gazes on the validation split");
  policy->add_option("CONFIG", policy_file, "Job config (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  policy->add_option("--max-train-images", policy_args.max_train_images,
                     "Use the first N training images (default: all)");
  policy->add_option("--max-val-images", policy_args.max_val_images,
                     "Use the first N validation images (default: all)");
  policy->callback([&global] {
    policy_args.config_path = policy_file.c_str();
    policy_args.log_level = global.log_level.c_str();
    auto* entry = reinterpret_cast<int (*)(const PolicyArgs*)>(torch_entry("saccade_torch_policy"));
    if (const int rc = entry(&policy_args); rc != 0) throw Exit{rc};
  });

  static std::string eval_file;
  static EvalArgs eval_args;
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Measure the frozen backbone, the probe's heads and the policy on the validation split: "
      "top-1 after every glimpse per mode of eval.modes, and the resolution sweep of "
      "eval.scales with tokens, FLOPs and time per image; writes job.work_dir/eval.json");
  eval->add_option("CONFIG", eval_file, "Job config (TOML)")->required()->check(CLI::ExistingFile);
  eval->add_option("--max-images", eval_args.max_images,
                   "Use the first N validation images (default: eval.images)");
  eval->add_option("--max-sweep-images", eval_args.max_sweep_images,
                   "Use the first N validation images in the sweep (default: eval.sweep_images)");
  eval->callback([&global] {
    eval_args.config_path = eval_file.c_str();
    eval_args.log_level = global.log_level.c_str();
    auto* entry = reinterpret_cast<int (*)(const EvalArgs*)>(torch_entry("saccade_torch_eval"));
    if (const int rc = entry(&eval_args); rc != 0) throw Exit{rc};
  });
}

}  // namespace saccade::cli
