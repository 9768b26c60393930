#!/usr/bin/env python3
"""Plot `saccade bench extract --json` figures: per-patch cost, build time and
accuracy against the exact box average, for the integral image, the image pyramid
and crop + INTER_AREA resize, by image size.

Usage: scripts/plot_extract.py extract_bench.json results/kernels/kernels_extract.png
Needs matplotlib (Debian's python3-matplotlib, installed by scripts/install-deps.sh).
Synthetic images are lines; real photos are points at their pixel count.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METHODS = (("integral", "o-"), ("pyramid", "d-"), ("crop_resize", "s--"))
COLOURS = {"integral": "tab:blue", "pyramid": "tab:green", "crop_resize": "tab:red"}


def series(rows, key, threads=None):
    pick = [r for r in rows if r.get(key, 0) > 0 and (threads is None or r["threads"] == threads)]
    syn = sorted((r["height"] * r["width"], r[key]) for r in pick if r["synthetic"])
    photos = [(r["height"] * r["width"], r[key]) for r in pick if not r["synthetic"]]
    return syn, photos


def draw(ax, syn, photos, style, colour, label, alpha=1.0):
    if syn:
        ax.plot([s[0] for s in syn], [s[1] for s in syn], style, color=colour, alpha=alpha,
                label=label)
    if photos:
        ax.plot([p[0] for p in photos], [p[1] for p in photos], "x", color=colour, alpha=alpha)


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    rows, acc = data["results"], data.get("accuracy", [])
    fig, (cost, build, error) = plt.subplots(1, 3, figsize=(15, 4.5))
    for threads in sorted({r["threads"] for r in rows}):
        alpha = 1.0 if threads == 1 else 0.45
        suffix = f", {threads} thread{'s' if threads > 1 else ''}"
        for method, style in METHODS:
            syn, photos = series(rows, f"{method}_us_per_patch", threads)
            draw(cost, syn, photos, style, COLOURS[method], method.replace("_", "-") + suffix,
                 alpha)
        for method, key in (("integral", "build_ms"), ("pyramid", "pyramid_build_ms")):
            syn, photos = series(rows, key, threads)
            draw(build, syn, photos, "o-" if method == "integral" else "d-", COLOURS[method],
                 method + suffix, alpha)
    for method, style in METHODS:
        syn, photos = series(acc, f"{method}_mean_abs")
        draw(error, syn, photos, style, COLOURS[method], method.replace("_", "-"))
    cost.set_title("cost per patch (us), P = 16, RGB; x = photos")
    build.set_title("one-time build per image (ms)")
    error.set_title("mean |error| vs the exact box average (0..255)")
    for ax, ylabel in ((cost, "us per patch"), (build, "ms per image"),
                       (error, "grey levels (0..255)")):
        ax.set_ylabel(ylabel)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("image size (pixels)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print("wrote", dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
