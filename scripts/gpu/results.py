#!/usr/bin/env python3
"""What scripts/gpu/run.sh makes of its checks' JSON (standard library only: the GPU
machine's Python may have nothing else).

  results.py losses STEP_JSON TOLERANCE         every step variant's loss difference; exit 1
                                                when one moved or failed (not out of memory)
  results.py fastest-keys STEP_JSON TOLERANCE BATCH
                                                the config keys of the fastest variant at BATCH
                                                that trained the same (stdout; views.* left out)
  results.py unpassed LIST GTEST_JSON           the tests of a --gtest_list_tests LIST that
                                                GTEST_JSON does not say passed or skipped
  results.py profile TRACE OUT_JSON             where a Kineto trace's device time went
  results.py summary OUT CODES_JSON             OUT/summary.json: exit codes and every figure
  results.py report OUT                         OUT/report.md: the verdicts and tables (printed)
"""
import collections
import glob
import json
import os
import re
import sys

MFU_TARGET = 0.30  # the training step on one H100 / H200 (docs/model.md)
FEED_TARGET = 0.90  # a learner fed by data actors against the same learner fed from memory
NOTES = {124: " (timed out)", 137: " (timed out)", 75: " (device lost: resumed)",
         134: " (aborted)", 139: " (segmentation fault)"}  # exit codes' meaning in the report


def load(path, default=None):
    """A JSON file, or `default` when it is missing or cut short (a check the budget stopped)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def step_rows(path):
    data = load(path, {})
    return data.get("rows", []) if isinstance(data, dict) else []


def trained_the_same(row, tolerance):
    """A step row that ran and whose losses stayed within `tolerance` (relative) of its
    call's first variant that ran at its batch (`loss_reference`; 0 for that variant)."""
    diff = row.get("max_loss_rel_diff")
    return not row.get("failure") and diff is not None and diff <= tolerance


def losses(path, tolerance):
    rows = step_rows(path)
    # Out of device memory is a figure (how large a batch fits), not a failure.
    bad = [r for r in rows if not trained_the_same(r, tolerance) and not r.get("out_of_memory")]
    for r in rows:
        diff = "-" if r.get("max_loss_rel_diff") is None else f"{r['max_loss_rel_diff']:.2e}"
        print(f"{r['variant']:<40} batch {r['batch']}: loss diff {diff} {r.get('failure') or ''}")
    return 1 if bad else 0


def fastest_keys(path, tolerance, batch):
    same = [r for r in step_rows(path) if r["batch"] == batch and r.get("config_keys")
            and trained_the_same(r, tolerance)]
    if not same:
        print(f"no step variant at batch {batch} to take the levers from: the config as it is",
              file=sys.stderr)
        return 0
    best = max(same, key=lambda r: r["images_per_second"])
    print(" ".join(k for k in best["config_keys"] if not k.startswith("views.")))
    print(f"the fastest step variant at batch {batch}: {best['variant']}, "
          f"{best['images_per_second']:.1f} images/s", file=sys.stderr)
    return 0


def kernel_kind(event):
    name = event["name"].lower()
    if event["cat"] != "kernel":
        return "memcpy/memset"
    for kind, pattern in (("gemm", "gemm|cutlass|sm90_xmma|cublas|matmul|nvjet"),
                          ("attention", "flash|fmha|attention|sdpa"),
                          ("layer_norm", "layer_norm|layernorm"), ("softmax", "softmax"),
                          ("reduce", "reduce"),
                          ("elementwise", "elementwise|vectorized|unrolled|foreach")):
        if re.search(pattern, name):
            return kind
    return "other"


def profile(trace_path, out_path):
    """Device busy share, kernels by kind, the top kernels, and the top ops that launched them
    with their input shapes (what tells a bias add from a residual add; the trace itself is
    too large to bring back)."""
    events = load(trace_path, {}).get("traceEvents", [])
    kernels = [e for e in events
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    if not kernels:
        print(f"results.py profile: no device events in {trace_path}", file=sys.stderr)
        return 1
    start = min(e["ts"] for e in kernels)
    end = max(e["ts"] + e["dur"] for e in kernels)
    kinds, names, counts = collections.Counter(), collections.Counter(), collections.Counter()
    # A kernel's "External id" is that of the op whose call launched it.
    launcher = {e["args"]["External id"]: e for e in events
                if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    ops, op_calls = collections.Counter(), collections.Counter()
    for e in kernels:
        kinds[kernel_kind(e)] += e["dur"]
        names[e["name"][:120]] += e["dur"]
        counts[e["name"][:120]] += 1
        op = launcher.get(e.get("args", {}).get("External id"))
        key = (op["name"] + " " + json.dumps(op["args"].get("Input Dims", [])[:3])) if op \
            else "(no op)"
        ops[key] += e["dur"]
        op_calls[key] += 1
    summary = {"span_ms": (end - start) / 1e3,
               "device_busy_ms": sum(e["dur"] for e in kernels) / 1e3,
               "kernels": len(kernels),
               "by_kind_ms": {k: v / 1e3 for k, v in kinds.most_common()},
               "top_kernels": [{"name": n, "ms": v / 1e3, "calls": counts[n]}
                               for n, v in names.most_common(25)],
               "top_ops": [{"op": n, "ms": v / 1e3, "kernels": op_calls[n]}
                           for n, v in ops.most_common(40)]}
    with open(out_path, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: summary[k] for k in ("span_ms", "device_busy_ms", "kernels",
                                              "by_kind_ms")}, indent=1))
    return 0


def summary(out, codes):
    gpus_path = os.path.join(out, "gpus.txt")
    gpus = open(gpus_path).read().splitlines() if os.path.exists(gpus_path) else []
    result = {"exit_codes": codes, "gpus": gpus}
    model = load(os.path.join(out, "model.json"))  # its rows carry images/s and MFU
    if isinstance(model, dict):
        result["model"] = model.get("rows", [])
    for log in sorted(glob.glob(os.path.join(out, "pretrain-*.log"))):
        # The trainer's own summary: steps, images/s, step-time split, the last k-NN check.
        lines = open(log, errors="replace").read().splitlines()
        result[os.path.basename(log)[:-4]] = [l for l in lines
                                              if "pretrain:" in l or "k-NN" in l][-6:]
    for name in ("extract", "extract_cpu_fresh", "extract_cpu_warm", "data", "step",
                 "step_large", "step_small", "step_profile", "torch_step", "feed", "feed_data",
                 "allreduce_nccl", "allreduce_gloo"):
        data = load(os.path.join(out, name + ".json"))
        if data is not None:
            result[name] = data
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("run.sh: exit codes", codes, "->", os.path.join(out, "summary.json"))
    return 0


def percent(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def number(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def gtest_results(path):
    """{Suite.Test: "passed" | "failed" | "skipped"} of a GoogleTest JSON file, or None."""
    data = load(path)
    if not isinstance(data, dict):
        return None
    results = {}
    for suite in data.get("testsuites", []):
        for t in suite.get("testsuite", []):
            result = "failed" if t.get("failures") else \
                "skipped" if t.get("result") == "SKIPPED" else "passed"
            results[f"{t.get('classname', suite.get('name', ''))}.{t['name']}"] = result
    return results


def unpassed(list_path, json_path):
    """The tests of a --gtest_list_tests listing that the binary's JSON does not say passed
    or skipped (all of them when it wrote none: the process died)."""
    done = gtest_results(json_path) or {}
    names, suite = [], ""
    for line in open(list_path, errors="replace").read().splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split()[0]  # "Suite." (a typed suite adds "  # TypeParam = ...")
        elif done.get(suite + line.split()[0]) not in ("passed", "skipped"):
            names.append(suite + line.split()[0])
    return names


def test_lines(out):
    lines = []
    # The binaries that ran (an exit code) or wrote results: one that died writes none.
    names = {os.path.basename(p)[:-5] for p in glob.glob(os.path.join(out, "*_tests.json"))}
    names |= {os.path.basename(p) for p in glob.glob(os.path.join(out, "rc", "*_tests"))}
    for name in sorted(names):
        results = gtest_results(os.path.join(out, name + ".json"))
        if results is None:
            text = f"- {name}: no result (it stopped before writing one)"
        else:
            failed = [t for t, r in results.items() if r == "failed"]
            skipped = [t for t, r in results.items() if r == "skipped"]
            ran = len(results) - len(skipped)
            text = f"- {name}: {ran - len(failed)} of {ran} passed"
            text += f", {len(skipped)} skipped" if skipped else ""
            text += f"; **failed**: {', '.join(failed)}" if failed else ""
        # The tests it did not pass, each again in a process of its own (run.sh): which fail
        # by themselves, and which only failed after another broke the process.
        if os.path.isdir(os.path.join(out, name + "-alone")):
            again = unpassed(os.path.join(out, name + "-list.txt"),
                             os.path.join(out, name + ".json"))
            alone = {t: (gtest_results(os.path.join(out, name + "-alone", t + ".json")) or {})
                     .get(t, "died") for t in again}
            passed = [t for t, r in alone.items() if r in ("passed", "skipped")]
            failed = [f"{t}{' (died)' if r == 'died' else ''}" for t, r in alone.items()
                      if r in ("failed", "died")]
            text += f"; run alone: {len(passed)} of {len(again)} passed"
            text += f", **failed alone**: {', '.join(failed)}" if failed else ""
        lines.append(text)
    return lines


def step_section(out, tolerance):
    """The step rows as tables, and the best MFU among the rows that trained the same as the
    first variant at their batch (compared with it, within `tolerance`) against MFU_TARGET;
    also returns those rows (with or without an MFU)."""
    lines, same = [], []
    for name in ("step", "step_large", "step_small"):
        data = load(os.path.join(out, name + ".json"))
        if not isinstance(data, dict) or not data.get("rows"):
            continue
        gflop = (data.get("flop_per_image") or 0) / 1e9
        lines += ["", f"`{name}` ({data.get('device_name', '?')}, {gflop:.1f} GFLOP per image; "
                      f"loss diff against the first variant that ran at the same batch):", "",
                  "| variant | batch | images/s | step ms | TFLOP/s | MFU | GiB | teacher | student"
                  " | loss | backward | update | other | loss diff |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in data["rows"]:
            if r.get("failure"):
                lines.append(f"| `{r['variant']}` | {r['batch']} | failed: {r['failure']} |"
                             + " |" * 11)
                continue
            p = r.get("phases_ms", {})
            diff = r.get("max_loss_rel_diff")
            lines.append("| " + " | ".join([
                f"`{r['variant']}`", str(r["batch"]), number(r["images_per_second"]),
                number(r["step_ms"], 0), number(r["tflops"]), percent(r.get("mfu")),
                number(r.get("peak_device_memory_gib")),
                *[number(p.get(k), 0) for k in ("teacher", "student", "loss", "backward",
                                                 "update", "other")],
                # A row that ran has a loss diff (0 for its batch's reference): without one
                # its losses were compared with nothing.
                "unchecked" if diff is None else f"{diff:.1e}"])
                + " |")
            if trained_the_same(r, tolerance):
                same.append((r, name))
        # --products: the step's products and attention alone, and the MFU bound of their time.
        for p in data.get("products") or []:
            if p.get("failure"):
                lines.append(f"- `{p['variant']}` at batch {p['batch']}, products and attention "
                             f"alone: failed: {p['failure']}")
                continue
            # Which kind of work falls short of the peak: forward products, their input and
            # weight gradients, attention forward and backward.
            kinds = p.get("by_kind") or {}
            by_kind = ", ".join(f"{label} {number(kinds[k].get('tflops'))}" for k, label in (
                ("forward", "forward"), ("input_grad", "input gradients"),
                ("weight_grad", "weight gradients"), ("attention_forward", "attention forward"),
                ("attention_backward", "attention backward")) if k in kinds)
            lines.append(
                f"- `{p['variant']}` at batch {p['batch']}, products and attention alone: "
                f"{number(p['products_ms_per_step'])} + {number(p['attention_ms_per_step'])} ms "
                f"per step, {number(p['tflops'])} TFLOP/s ({percent(p.get('peak_share'))} of "
                f"peak); the step's MFU cannot pass {percent(p.get('mfu_bound'))} while they run "
                f"at this rate" + (f" (TFLOP/s by kind: {by_kind})" if by_kind else ""))
    candidates = [(r, name) for r, name in same if r.get("mfu") is not None]
    if not lines:
        verdict = []  # the step checks did not run (or wrote no row)
    elif not candidates:
        verdict = [f"- Step MFU: no row with an MFU that trained the same (target >= "
                   f"{MFU_TARGET:.0%}: not shown)"]
    else:
        best, name = max(candidates, key=lambda c: c[0]["mfu"])
        met = "met" if best["mfu"] >= MFU_TARGET else "**not met**"
        verdict = [f"- Step MFU: best {percent(best['mfu'])} (`{best['variant']}`, batch "
                   f"{best['batch']}, {number(best['images_per_second'])} images/s, {name}); "
                   f"target >= {MFU_TARGET:.0%}: {met}"]
    return verdict, lines, [r for r, _ in same]


def torch_section(out, saccade_rows):
    """The same step in plain PyTorch (scripts/gpu/torch_step.py): its rows, and saccade's
    fastest row that trained the same against PyTorch's fastest at the same batch."""
    data = load(os.path.join(out, "torch_step.json"))
    if not isinstance(data, dict) or not data.get("rows"):
        return [], []
    counted = data.get("counted_flop_per_image")
    flops = data.get("flop_per_image") or 0
    lines = ["", f"`torch_step`: the same step in PyTorch {data.get('torch')} on "
                 f"{data.get('device_name')} ({data.get('parameters', 0):,} parameters, checked "
                 f"against saccade's; {flops / 1e9:.1f} GFLOP per image by saccade's count"
                 + (f", {counted / 1e9:.1f} counted by torch" if counted else "") + "):", "",
             "| variant | batch | images/s | step ms | TFLOP/s | MFU | GiB | warm-up s |",
             "|---|---|---|---|---|---|---|---|"]
    ran = []
    for r in data["rows"]:
        if r.get("failure"):
            lines.append(f"| `{r['variant']}` | {r['batch']} | failed: {r['failure']} |" + " |" * 5)
            continue
        ran.append(r)
        lines.append("| " + " | ".join([
            f"`{r['variant']}`", str(r["batch"]), number(r["images_per_second"]),
            number(r["step_ms"], 0), number(r["tflops"]), percent(r.get("mfu")),
            number(r.get("peak_device_memory_gib")), number(r.get("warmup_s"))]) + " |")
    if not ran:
        return ["- Against PyTorch: no PyTorch variant ran"], lines
    best = max(ran, key=lambda r: r["images_per_second"])
    ours = [r for r in saccade_rows if r["batch"] == best["batch"]]
    if not ours:
        return [f"- Against PyTorch: no saccade row at batch {best['batch']} that trained the "
                f"same to compare with"], lines
    fastest = max(ours, key=lambda r: r["images_per_second"])
    ratio = fastest["images_per_second"] / best["images_per_second"]
    return [f"- Against PyTorch (batch {best['batch']}): saccade "
            f"{number(fastest['images_per_second'])} images/s (`{fastest['variant']}`), PyTorch "
            f"{number(best['images_per_second'])} (`{best['variant']}`): {ratio:.2f}x, "
            + ("ahead" if ratio > 1 else "**behind**")], lines


def profile_section(out):
    p = load(os.path.join(out, "step_profile.json"))
    if not isinstance(p, dict) or "span_ms" not in p:
        return []
    kinds = ", ".join(f"{k} {v:.0f}" for k, v in p.get("by_kind_ms", {}).items())
    lines = ["", f"Profiled step: {p['span_ms']:.0f} ms span, device busy "
                 f"{p['device_busy_ms']:.0f} ms, {p['kernels']} kernels; ms by kind: {kinds}.",
             "Top ops:"]
    lines += [f"- {o['ms']:.1f} ms, {o['kernels']} kernels: `{o['op']}`"
              for o in p.get("top_ops", [])[:8]]
    return lines


def feed_section(out):
    verdicts, lines = [], []
    for name in ("feed", "feed_data"):
        feed = (load(os.path.join(out, name + ".json")) or {}).get("feed")
        if not isinstance(feed, dict) or not feed.get("runs"):
            continue
        lines += ["", f"`{name}`: one learner on {feed.get('device')}, batch {feed.get('batch')},"
                      f" views cut on the {feed.get('cut_on')}; fed from memory "
                      f"{number(feed.get('memory_fed_images_per_second'))} images/s:", "",
                  "| data actors | images/s | of memory-fed | data wait | wire MB/s | host cores"
                  " | exit |", "|---|---|---|---|---|---|---|"]
        ok = []
        for r in feed["runs"]:
            wire = r.get("wire_bytes_per_second")
            lines.append("| " + " | ".join([
                str(r["data_actors"]), number(r.get("images_per_second")),
                percent(r.get("of_memory_fed")), percent(r.get("data_wait_share")),
                number(None if wire is None else wire / 1e6), number(r.get("host_cores"), 2),
                f"{r.get('exit')}{' (timed out)' if r.get('exit') == -1 else ''}"]) + " |")
            if r.get("exit") == 0 and r.get("of_memory_fed") is not None:
                ok.append(r)
        if ok:
            best = max(ok, key=lambda r: r["of_memory_fed"])
            met = "met" if best["of_memory_fed"] >= FEED_TARGET else "**not met**"
            verdicts.append(f"- Feed (`{name}`, cut on the {feed.get('cut_on')}): best "
                            f"{percent(best['of_memory_fed'])} of the memory-fed rate with "
                            f"{best['data_actors']} data actor{'' if best['data_actors'] == 1 else 's'}; "
                            f"target >= {FEED_TARGET:.0%}: "
                            f"{met}")
        else:
            verdicts.append(f"- Feed (`{name}`): no run finished")
    return verdicts, lines


def report(out, tolerance):
    s = load(os.path.join(out, "summary.json"), {})
    codes = s.get("exit_codes", {})
    failed = {k: v for k, v in codes.items() if v != 0}
    if not codes:
        exits = "none recorded"
    elif not failed:
        exits = "all 0"
    else:
        exits = "**not 0**: " + ", ".join(
            f"{k} {v}{NOTES.get(v, '')}" for k, v in failed.items())
        exits += f"; 0: {len(codes) - len(failed)}"
    head = [f"# GPU checks: {'; '.join(s.get('gpus', [])) or 'no GPU listed'}", "",
            f"- Exit codes: {exits}"]
    head += test_lines(out)
    step_verdict, step_lines, same_rows = step_section(out, tolerance)
    torch_verdict, torch_lines = torch_section(out, same_rows)
    feed_verdicts, feed_lines = feed_section(out)
    text = "\n".join(head + step_verdict + torch_verdict + feed_verdicts + step_lines
                     + profile_section(out) + torch_lines + feed_lines) + "\n"
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    print(text, end="")
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    command, args = argv[1], argv[2:]
    tolerance = float(os.environ.get("SACCADE_GPU_STEP_TOLERANCE", "0.02"))
    if command == "losses" and len(args) == 2:
        return losses(args[0], float(args[1]))
    if command == "fastest-keys" and len(args) == 3:
        return fastest_keys(args[0], float(args[1]), int(args[2]))
    if command == "unpassed" and len(args) == 2:
        print("\n".join(unpassed(args[0], args[1])))
        return 0
    if command == "profile" and len(args) == 2:
        return profile(args[0], args[1])
    if command == "summary" and len(args) == 2:
        return summary(args[0], json.loads(args[1]))
    if command == "report" and len(args) == 1:
        return report(args[0], tolerance)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
