#!/usr/bin/env python3
"""The evaluation of a job (WORK_DIR/eval.json): its tables and two plots.

Usage: scripts/plot_eval.py WORK_DIR [OUT_DIR]
Prints top-1 per glimpse per mode and the resolution sweep, and writes
OUT_DIR/eval_glimpses.png (top-1 after each glimpse, one line per mode) and
OUT_DIR/eval_resolution.png (top-1, GFLOPs and ms per image against the image
side, per mode). scripts/plot_learning.py calls it too.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# One colour and one marker per mode, so every series reads apart in colour and in grey.
COLORS = {"vit": "tab:blue", "random": "tab:gray", "scan": "tab:orange",
          "fixed_path": "tab:green", "policy": "tab:red", "vit_fixed_patch": "tab:purple"}
MARKERS = {"vit": "s", "random": "v", "scan": "D", "fixed_path": "^", "policy": "o",
           "vit_fixed_patch": "P"}
plt.rcParams.update({"font.size": 11, "axes.titlesize": 11, "legend.fontsize": 10})


def style(mode):
    """Colour and marker of a mode (a mode without its own gets black and a cross)."""
    return {"color": COLORS.get(mode, "black"), "marker": MARKERS.get(mode, "x")}


def probed(report, short=False):
    """What a report scored: a checkpoint step, or a backbone file (`--backbone`); short =
    the file's folder and name, for a plot's title."""
    path = report.get("backbone_file")
    if not path:
        return f"checkpoint {report['checkpoint_step']}"
    if short:
        path = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
    return f"backbone {path}"


def print_eval(r):
    print(f"evaluation of {probed(r)}: top-1 % after each glimpse "
          f"({r['images']} validation images)")
    for c in r["curves"]:
        note = "   (one step over the ViT-mode grid)" if c["mode"] == "vit" else ""
        print(f"  {c['mode']:<8}" + "".join(f"{100 * a:>7.1f}" for a in c["accuracy"]) + note)
    print("  gaze spread (RMS distance from the mean gaze, short sides; 0 = one path for all)")
    for c in r["curves"]:
        if c["gaze_spread"]:
            print(f"  {c['mode']:<8}" + "".join(f"{d:>7.3f}" for d in c["gaze_spread"]))
    if not r["sweep"]:
        return
    print(f"resolution sweep ({r['sweep_images']} images): top-1 % after the last glimpse; "
          "patch tokens, GFLOPs, ms per image")
    print(f"  {'mode':<16}{'side':>6}{'top-1':>8}{'tokens':>8}{'GFLOPs':>9}{'ms':>8}")
    for p in r["sweep"]:
        print(f"  {p['mode']:<16}{p['image_side']:>6}{100 * p['accuracy']:>8.1f}{p['tokens']:>8}"
              f"{p['gflops']:>9.4f}{p['ms_per_image']:>8.2f}")


def plot_glimpses(r, out):
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for c in r["curves"]:
        if c["mode"] == "vit":
            ax.axhline(100 * c["accuracy"][0], ls="--", color=style("vit")["color"],
                       label="vit (one step)")
        else:
            xs = range(1, len(c["accuracy"]) + 1)
            ax.plot(xs, [100 * a for a in c["accuracy"]], "-", label=c["mode"], **style(c["mode"]))
    ax.set_xticks(range(1, r["glimpses"] + 1))
    ax.set_xlabel("glimpse (count)")
    ax.set_ylabel("validation top-1 (%)")
    head = f", {r['task_head']} task head" if r.get("task_head") else ""
    ax.set_title(f"{probed(r, short=True)}, {r['images']} validation images{head}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def plot_resolution(r, out):
    modes = []
    for p in r["sweep"]:
        if p["mode"] not in modes:
            modes.append(p["mode"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for mode in modes:
        pts = [p for p in r["sweep"] if p["mode"] == mode]
        sides = [p["image_side"] for p in pts]
        axes[0].plot(sides, [100 * p["accuracy"] for p in pts], "-", label=mode, **style(mode))
        axes[1].plot(sides, [p["gflops"] for p in pts], "-", label=mode, **style(mode))
        axes[2].plot(sides, [p["ms_per_image"] for p in pts], "-", label=mode, **style(mode))
    for ax, title, ylabel in zip(axes, ("accuracy after the last glimpse",
                                        "backbone compute per image", "wall time per image"),
                                 ("validation top-1 (%)", "GFLOPs per image", "ms per image")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("image side (pixels)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    axes[0].legend()
    fig.suptitle(f"resolution sweep: {r['sweep_images']} validation images upscaled")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(work_dir, out_dir):
    """Prints and plots WORK_DIR/eval.json; returns the files written (none without it)."""
    path = os.path.join(work_dir, "eval.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        r = json.load(f)
    print_eval(r)
    os.makedirs(out_dir, exist_ok=True)
    plot_glimpses(r, os.path.join(out_dir, "eval_glimpses.png"))
    wrote = ["eval_glimpses.png"]
    if r["sweep"]:
        plot_resolution(r, os.path.join(out_dir, "eval_resolution.png"))
        wrote.append("eval_resolution.png")
    return wrote


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    written = main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else sys.argv[1])
    if not written:
        print(f"{sys.argv[1]}: no eval.json", file=sys.stderr)
        sys.exit(1)
    print("wrote " + ", ".join(written))
