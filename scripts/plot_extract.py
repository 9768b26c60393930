#!/usr/bin/env python3
"""Plot per-patch extraction cost vs image size from bench_extract's JSON.

Usage: scripts/plot_extract.py extract_bench.json docs/kernels_extract.png
Needs matplotlib (pip install matplotlib). Synthetic images are lines; real photos
are points at their pixel count.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    rows = data["results"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"integral": "o-", "crop_resize": "s--"}
    for threads in sorted({r["threads"] for r in rows}):
        for method, key in (("integral", "integral_us_per_patch"),
                            ("crop_resize", "crop_resize_us_per_patch")):
            syn = sorted((r["height"] * r["width"], r[key]) for r in rows
                         if r["synthetic"] and r["threads"] == threads and r[key] > 0)
            photos = [(r["height"] * r["width"], r[key]) for r in rows
                      if not r["synthetic"] and r["threads"] == threads and r[key] > 0]
            label = f"{method.replace('_', '-')}, {threads} thread{'s' if threads > 1 else ''}"
            if syn:
                line, = ax.plot([s[0] for s in syn], [s[1] for s in syn], styles[method],
                                label=label + " (synthetic)")
                if photos:
                    ax.plot([p[0] for p in photos], [p[1] for p in photos], "x",
                            color=line.get_color(), label=label + " (photos)")
    # Thread CPU time of the single-threaded integral runs (robust on a shared machine).
    cpu = sorted((r["height"] * r["width"], r.get("integral_cpu_us_per_patch", 0)) for r in rows
                 if r["synthetic"] and r["threads"] == 1 and r.get("integral_cpu_us_per_patch", 0) > 0)
    if cpu:
        ax.plot([c[0] for c in cpu], [c[1] for c in cpu], "^:", color="black",
                label="integral, 1 thread, thread CPU time (synthetic)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("image size (pixels)")
    ax.set_ylabel("cost per patch (us), P = 16, RGB")
    ax.set_title("Foveal extraction: integral image vs crop + INTER_AREA")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print("wrote", dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
