#!/usr/bin/env python3
"""The results of a job: its tables, k-NN over pretraining steps, probe top-1 per glimpse.

Usage: scripts/plot_learning.py WORK_DIR [OUT_DIR]
Reads WORK_DIR/metrics.jsonl (the pretraining's k-NN checks, target entropy),
WORK_DIR/probe.json (the probe stage or `saccade probe`), WORK_DIR/policy.json
(the policy stage or `saccade policy`) and WORK_DIR/eval.json (the eval stage or
`saccade eval`, via scripts/plot_eval.py); prints their tables and writes
OUT_DIR/learning_knn.png, OUT_DIR/probe_glimpses.png, policy_training.png (GRPO's
validation curve), eval_glimpses.png and eval_resolution.png (OUT_DIR defaults to WORK_DIR). Needs matplotlib (Debian: python3-matplotlib, installed by
scripts/install-deps.sh).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_eval  # noqa: E402


def plot_knn(metrics_path, out):
    knn, glimpse, entropy = [], [], []
    glimpse_key = None  # the last glimpse the checks measured: knn_glimpse_<G>
    with open(metrics_path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("stage") != "pretrain":
                continue
            # A training line's "step" is the step just taken; the initial check has no loss.
            step = row["step"] + 1 if "loss" in row else row["step"]
            if row.get("knn") is not None:
                knn.append((step, 100 * row["knn"]))
                keys = sorted((k for k in row if k.startswith("knn_glimpse_")),
                              key=lambda k: int(k.rsplit("_", 1)[1]))
                if keys:
                    glimpse_key = keys[-1]
                    glimpse.append((step, 100 * row[glimpse_key]))
            if row.get("target_entropy_ratio") is not None:
                entropy.append((step, row["target_entropy_ratio"]))
    if not knn:
        print(f"{metrics_path}: no k-NN checks (ssl.knn_every_steps = 0?)", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(*zip(*knn), "o-", color="tab:blue", label="ViT mode")
    if glimpse:
        n = glimpse_key.rsplit("_", 1)[1]
        ax.plot(*zip(*glimpse), "s--", color="tab:green", label=f"after {n} random glimpses")
    ax.legend(loc="lower right", title="k-NN top-1 (teacher)")
    ax.set_xlabel("pretraining step")
    ax.set_ylabel("k-NN top-1 (%)", color="tab:blue")
    ax.grid(alpha=0.3)
    if entropy:
        ax2 = ax.twinx()
        ax2.plot(*zip(*entropy), color="tab:orange", alpha=0.6, lw=0.8,
                 label="target entropy / ln K")
        ax2.set_ylabel("target entropy / ln K", color="tab:orange")
        ax2.set_ylim(0, 1.05)
    ax.set_title("Learning while it happens (held-apart k-NN check)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return True


def plot_glimpses(probe_path, out):
    with open(probe_path) as f:
        report = json.load(f)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    colors = {"pretrained": "tab:blue", "random_init": "tab:gray", "pixels": "tab:green",
              "supervised": "tab:red"}
    markers = {"pretrained": "o", "random_init": "v", "pixels": "P", "supervised": "D"}
    for ax, kind in zip(axes, ("knn", "linear")):
        for row in report["rows"]:
            if row[f"vit_{kind}"] is None:  # a transformer head's row has no k-NN
                continue
            # NAME/feature rows (all_states, state_and_patch_mean) share NAME's colour, dashed.
            base, _, feature = row["name"].partition("/")
            color = colors.get(base, None)
            steps = row[f"step_{kind}"]
            vit = 100 * row[f"vit_{kind}"]
            if steps:
                xs = list(range(1, len(steps) + 1))
                marker = markers.get(base, "x")
                ax.plot(xs, [100 * v for v in steps], marker + ("--" if feature else "-"),
                        color=color, mfc="none" if feature else color,
                        label=f"{row['name']}, glimpses")
                ax.plot([0], [vit], "D" if feature else "s", color=color, ms=8,
                        mfc="none" if feature else color, label=f"{row['name']}, ViT mode")
            else:
                ax.axhline(vit, ls="--", color=color, label=f"{row['name']} (ViT grid)")
        longest = max(len(r[f"step_{kind}"]) for r in report["rows"])
        ax.set_xticks(range(0, longest + 1))
        ax.set_xlabel("glimpse (count; 0 = ViT mode)")
        ax.set_title(f"{'k-NN' if kind == 'knn' else 'linear'} top-1")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation top-1 (%)")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"probe of {plot_eval.probed(report, short=True)}: "
                 f"{report['train_images']} train / {report['val_images']} val images")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return True


def plot_policy(policy_path, out):
    """GRPO's training curve: the policy's validation top-1 per glimpse and the reward."""
    with open(policy_path) as f:
        r = json.load(f)
    curve = r.get("val_curve") or []
    if not curve:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    batches = [p["batches"] for p in curve]
    glimpses = len(curve[0]["accuracy"])
    cmap = plt.get_cmap("viridis")
    for g in range(glimpses):
        ax.plot(batches, [100 * p["accuracy"][g] for p in curve], "o-", ms=3,
                color=cmap(g / max(1, glimpses - 1)), label=f"after glimpse {g + 1}")
    fixed = r.get("fixed_path_accuracy") or []
    for g, a in enumerate(fixed[:glimpses]):  # the learned fixed path's end, same budget
        ax.plot([batches[-1]], [100 * a], "x", ms=8, color=cmap(g / max(1, glimpses - 1)),
                label="learned fixed path, end" if g == 0 else None)
    ax.set_xlabel("rollout batches trained")
    ax.set_ylabel("validation top-1 of the policy's mode (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax2 = ax.twinx()
    ax2.plot(batches, [p["reward"] for p in curve], color="tab:red", alpha=0.6, lw=1)
    ax2.set_ylabel(f"training reward ({r.get('reward', 'probability')})", color="tab:red")
    ax.set_title(f"GRPO on {plot_eval.probed(r, short=True)} ({r.get('task_head', 'linear')} head,"
                 f" {'policy' if r.get('sees_state', True) else 'fixed path'})")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return True


def print_probe(probe_path):
    with open(probe_path) as f:
        r = json.load(f)
    glimpses = max((len(row["step_knn"]) for row in r["rows"]), default=0)
    print(f"probe of {plot_eval.probed(r)}: {r['train_images']} train / "
          f"{r['val_images']} val images, top-1 % (k-NN / linear)")
    print(f"{'':<30}{'ViT mode':>14}" + "".join(f"{f'glimpse {g + 1}':>14}" for g in range(glimpses)))
    for row in r["rows"]:
        cells = [(row["vit_knn"], row["vit_linear"])] + list(zip(row["step_knn"], row["step_linear"]))
        print(f"{row['name']:<30}" + "".join(
            f"{'-' if k is None else f'{100 * k:.1f}':>7}{100 * l:>7.1f}" for k, l in cells))
    sup = r.get("supervised")
    if sup:  # probe.baselines "supervised": trained by the probe, same [ssl] keys, with labels
        trained = (f"trained in {sup['seconds']:.0f} s at {sup['images_per_second']:.1f} images/s"
                   if sup["seconds"] else "trained by an earlier probe")
        print(f"supervised: same backbone and views with labels, {sup['steps']} steps, {trained}")


def print_policy(policy_path):
    with open(policy_path) as f:
        r = json.load(f)
    print(f"gaze policy on {plot_eval.probed(r)}: GRPO on {r['train_images']} images, "
          f"validation top-1 % after each glimpse ({r['val_images']} images)")
    for name, label in (("random", "random"), ("scan", "scan"), ("fixed_path", "fixed path"),
                        ("policy", "policy")):
        acc = r.get(f"{name}_accuracy")
        if acc:
            print(f"  {label:<11}" + "".join(f"{100 * a:>7.1f}" for a in acc))


def main(work_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, show in (("probe.json", print_probe), ("policy.json", print_policy)):
        path = os.path.join(work_dir, name)
        if os.path.exists(path):
            show(path)
    wrote = []
    metrics = os.path.join(work_dir, "metrics.jsonl")
    if os.path.exists(metrics) and plot_knn(metrics, os.path.join(out_dir, "learning_knn.png")):
        wrote.append("learning_knn.png")
    probe = os.path.join(work_dir, "probe.json")
    if os.path.exists(probe) and plot_glimpses(probe, os.path.join(out_dir, "probe_glimpses.png")):
        wrote.append("probe_glimpses.png")
    policy = os.path.join(work_dir, "policy.json")
    if os.path.exists(policy) and plot_policy(policy, os.path.join(out_dir, "policy_training.png")):
        wrote.append("policy_training.png")
    wrote += plot_eval.main(work_dir, out_dir)
    if not wrote:
        print(f"{work_dir}: nothing to plot (no metrics.jsonl k-NN checks, no probe.json)",
              file=sys.stderr)
        return 1
    print("wrote " + ", ".join(os.path.join(out_dir, w) for w in wrote))
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else sys.argv[1]))
