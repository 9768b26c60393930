#!/usr/bin/env python3
"""The demo's closing table: what pretraining and the gaze policy bought, in numbers.

Usage: scripts/demo_table.py WORK_DIR
Reads WORK_DIR/probe.json (the probe stage) and WORK_DIR/eval.json (the eval stage) and
prints, as Markdown: the k-NN top-1 of the pretrained backbone and of its random
initialisation after each random glimpse (the same probe report), then the top-1 of every
gaze mode after each glimpse (the same task head), with a sentence on each comparison.
"""
import json
import os
import sys


def pct(values):
    return [f"{100 * v:.1f}" for v in values]


def row(label, cells):
    return "| " + label + " | " + " | ".join(cells) + " |"


def main(work_dir):
    with open(os.path.join(work_dir, "probe.json")) as f:
        probe = json.load(f)
    with open(os.path.join(work_dir, "eval.json")) as f:
        ev = json.load(f)
    rows = {r["name"]: r for r in probe["rows"]}
    pre, rnd = rows["pretrained"]["step_knn"], rows["random_init"]["step_knn"]
    k = len(pre)
    print(f"k-NN top-1 (%) after each random glimpse, {probe['val_images']} validation images:\n")
    print(row("backbone", [f"glimpse {g + 1}" for g in range(k)]))
    print(row("---", ["---"] * k))
    print(row("pretrained", pct(pre)))
    print(row("random initialisation", pct(rnd)))
    gain = 100 * (pre[-1] - rnd[-1])
    print(f"\nAfter {k} random glimpses the pretrained backbone is {gain:+.1f} points over its "
          f"random initialisation.\n")

    curves = {c["mode"]: c["accuracy"] for c in ev["curves"]}
    names = {"policy": "gaze policy (GRPO)", "random": "random gazes",
             "scan": "centre-first scan", "fixed_path": "learned fixed path"}
    modes = [m for m in names if m in curves]
    n = min(len(curves[m]) for m in modes)
    print(f"Top-1 (%) of the task head after each glimpse, {ev['images']} validation images:\n")
    print(row("gazes", [f"glimpse {g + 1}" for g in range(n)]))
    print(row("---", ["---"] * n))
    for m in modes:
        print(row(names[m], pct(curves[m][:n])))
    if "policy" in curves and "random" in curves:
        policy, random = curves["policy"][:n], curves["random"][:n]
        margins = [100 * (p - r) for p, r in zip(policy[1:], random[1:])]
        above = all(m > 0 for m in margins)
        verdict = "above" if above else "not above"
        print(f"\nFrom the second glimpse on, the policy is {verdict} random gazes at every "
              f"glimpse (by {min(margins):+.1f} to {max(margins):+.1f} points).", end="")
        for m in ("scan", "fixed_path"):
            if m in curves:
                d = [100 * (p - o) for p, o in zip(policy[1:], curves[m][1:n])]
                lead = sum(x > 0 for x in d)
                print(f" Against the {names[m]} it leads at {lead} of {len(d)} glimpses "
                      f"({min(d):+.1f} to {max(d):+.1f}).", end="")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
