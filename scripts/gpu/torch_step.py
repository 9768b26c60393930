#!/usr/bin/env python3
"""The sequential-to-global DINO training step of `saccade bench step`, in plain PyTorch.

A reference for saccade's step on the same device: the same model (every parameter's name
and shape checked against the one saccade builds), the same views' tokens, the same
objective and update, written as a PyTorch user would write it, eager or under
torch.compile. It reads what to build from the JSON of `saccade bench step --json` (its
"step" object, from the same config) and writes images/s, TFLOP/s and MFU counted with
saccade's own FLOPs per image, so the two are compared at equal work.

    torch_step.py STEP_JSON --batch 256 [--device cuda] [--variants eager,blocks,model]
                  [--precision bf16|fp32] [--warmup 3] [--steps 6] [--json OUT]

Variants: eager; blocks (torch.compile of each transformer block, as TorchTitan compiles
its models); model (torch.compile of the whole backbone and head). Compile time is in the
warm-up and reported (warmup_s). On torch >= 2.1 the script also counts the FLOPs its step
runs (torch.utils.flop_counter, on a batch of --flop-check-batch) and reports them beside
saccade's analytic count.

What it leaves out, all in its favour: the batch's upload and the views' augmentation and
normalisation on the device (its patches wait on the device, already normalised), the
checks and figures saccade reads every step (it reads the loss). docs/model.md, "Against
PyTorch", has the comparison. Needs only torch (CPU: 1.13 eager; GPU: 2.x).
"""

import argparse
import copy
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2


def gelu(x, approximate):
    return F.gelu(x, approximate="tanh") if approximate else F.gelu(x)


class Mlp(nn.Module):
    def __init__(self, dim_in, hidden, dim_out, tanh=False):
        super().__init__()
        self.fc1, self.fc2, self.tanh = nn.Linear(dim_in, hidden), nn.Linear(hidden, dim_out), tanh

    def forward(self, x):
        return self.fc2(gelu(self.fc1(x), self.tanh))


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
        b, n, w = x.shape
        q, k, v = (
            self.qkv(x).view(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        )
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v)
        else:  # torch 1.x: its formula, in 3-D products (4-D ones loop over a batch there)
            q, k, v = (t.flatten(0, 1) for t in (q, k, v))
            a = torch.bmm(
                torch.softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1]), dim=-1), v
            )
            a = a.view(b, self.heads, n, w // self.heads)
        return self.proj(a.transpose(1, 2).reshape(b, n, w))


class LayerScale(nn.Module):
    def __init__(self, width, init):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((width,), init))

    def forward(self, x):
        return x * self.gamma


class Block(nn.Module):
    def __init__(self, o):
        super().__init__()
        w, eps = o["width"], o["norm_eps"]
        self.norm1, self.norm2 = nn.LayerNorm(w, eps=eps), nn.LayerNorm(w, eps=eps)
        self.attn = Attention(w, o["heads"])
        self.ls1, self.ls2 = LayerScale(w, o["layerscale_init"]), LayerScale(
            w, o["layerscale_init"]
        )
        self.mlp = Mlp(w, o["mlp_hidden"], w, tanh=o["gelu"] == "tanh")

    def forward(self, x):
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class Backbone(nn.Module):
    """One glimpse step: [state tokens, patch tokens] through the blocks; returns the state.
    model.state_input = "normed" (the paper's): the carried state, detached, plus the learned
    state embedding."""

    def __init__(self, o):
        super().__init__()
        if o["state_input"] != "normed":
            raise SystemExit(
                f"torch_step: model.state_input = \"{o['state_input']}\": only \"normed\" is written here"
            )
        w = o["width"]
        self.n_state = o["n_state"]
        self.patch_embed = nn.Linear(o["channels"] * o["patch_size"] ** 2, w)
        self.pos_mlp = Mlp(3, o["pos_mlp_hidden"], w)
        self.state_embed = nn.Parameter(torch.zeros(o["n_state"], w))
        self.blocks = nn.ModuleList(Block(o) for _ in range(o["depth"]))
        self.norm = nn.LayerNorm(w, eps=o["norm_eps"])

    def forward(self, patches, positions, state=None):
        s = self.state_embed.expand(patches.shape[0], -1, -1)
        if state is not None:
            s = state.detach() + s
        x = torch.cat([s, self.patch_embed(patches) + self.pos_mlp(positions)], dim=1)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)[:, : self.n_state]


class DinoHead(nn.Module):
    def __init__(self, width, o):
        super().__init__()
        h, b = o["hidden_dim"], o["bottleneck_dim"]
        self.mlp = nn.Sequential(
            nn.Linear(width, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, b)
        )
        self.last_layer = nn.Module()
        self.last_layer.weight_v = nn.Parameter(
            torch.empty(o["n_prototypes"], b).uniform_(-(b**-0.5), b**-0.5)
        )
        self.last_layer.weight_g = nn.Parameter(
            torch.ones(o["n_prototypes"], 1), requires_grad=o["train_prototype_scale"]
        )

    def forward(self, x):
        z = F.normalize(self.mlp(x), dim=-1, eps=1e-12)
        v = self.last_layer.weight_v
        return z @ (self.last_layer.weight_g * v / v.norm(dim=1, keepdim=True)).t()


class Net(nn.Module):
    def __init__(self, step):
        super().__init__()
        self.backbone = Backbone(step["backbone"])
        self.head = DinoHead(step["backbone"]["width"], step["head"])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        nn.init.trunc_normal_(self.backbone.state_embed, std=0.02)


def check_same_model(net, step):
    """Every parameter saccade's student has, by name and shape, and no other."""
    ours = {n: list(p.shape) for n, p in net.named_parameters()}
    theirs = {n: list(s) for n, s in step["parameters"]}
    if ours != theirs:
        missing = sorted(set(theirs) - set(ours))[:5]
        extra = sorted(set(ours) - set(theirs))[:5]
        shapes = sorted(n for n in set(ours) & set(theirs) if ours[n] != theirs[n])[:5]
        raise SystemExit(
            f"torch_step: not saccade's model: missing {missing}, extra {extra}, other shapes {shapes}"
        )
    return sum(p.numel() for p in net.parameters())


def sinkhorn_knopp(logits, temp, iterations):
    q = torch.exp(logits.float() / temp).t()
    q = q / q.sum()
    k, n = q.shape
    for _ in range(iterations):
        q = q / q.sum(dim=1, keepdim=True) / k
        q = q / q.sum(dim=0, keepdim=True) / n
    return (q * n).t()


def koleo(x):
    x = F.normalize(x.float(), dim=-1, eps=1e-8)
    with torch.no_grad():
        dots = x @ x.t()
        dots.fill_diagonal_(-1)
        nearest = dots.argmax(dim=1)
    return -torch.log(F.pairwise_distance(x, x[nearest]) + 1e-8).mean()


def cross_entropy(targets, logits, temp):
    return -(targets * F.log_softmax(logits.float() / temp, dim=-1)).sum(-1).mean()


class Step:
    """Teacher targets, student global / local / sequential passes, the loss, backward,
    clipping, AdamW and the EMA: `saccade bench step`'s step (docs/ssl.md)."""

    def __init__(self, step, device, precision):
        self.o, self.device = step["objective"], torch.device(device)
        self.student = Net(step).to(device)
        self.teacher = copy.deepcopy(self.student).requires_grad_(False)
        decay = [
            p for n, p in self.student.named_parameters() if p.ndim > 1 and "state_embed" not in n
        ]
        no_decay = [
            p for n, p in self.student.named_parameters() if p.ndim <= 1 or "state_embed" in n
        ]
        fast = {"fused": True} if TORCH_2 and self.device.type == "cuda" else {"foreach": True}
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.04}, {"params": no_decay, "weight_decay": 0.0}],
            lr=1e-4,
            betas=(0.9, 0.999),
            eps=1e-8,
            **fast,
        )
        self.trainable = [p for p in self.student.parameters() if p.requires_grad]
        self.student_params = list(self.student.parameters())
        self.teacher_params = list(self.teacher.parameters())
        self.autocast = precision == "bf16"

    def compile(self, how):
        if not hasattr(torch, "compile"):
            raise RuntimeError(f"compile={how} needs PyTorch >= 2 (this is {torch.__version__})")
        import torch._dynamo as dynamo

        # Static shapes (a graph per view shape, as the step has five) and room for them all.
        dynamo.config.automatic_dynamic_shapes = False
        for limit in (
            "cache_size_limit",
            "recompile_limit",
            "accumulated_cache_size_limit",
            "accumulated_recompile_limit",
        ):
            if hasattr(dynamo.config, limit):
                setattr(dynamo.config, limit, max(getattr(dynamo.config, limit), 256))
        for net in (self.student, self.teacher):
            modules = list(net.backbone.blocks) if how == "blocks" else [net.backbone, net.head]
            for m in modules:
                m.compile()

    def sequence(self, net, patches, positions, all_steps):
        state, logits = None, []
        for k in range(patches.shape[0]):
            state = net.backbone(patches[k], positions[k], state)
            if all_steps or k == patches.shape[0] - 1:
                logits.append(net.head(state[:, 0]))
        return logits

    def __call__(self, batch):
        o, b = self.o, batch["student_global"][0].shape[0]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            with torch.no_grad():
                t_global = self.teacher.head(self.teacher.backbone(*batch["teacher_global"])[:, 0])
                t_final = self.sequence(self.teacher, *batch["teacher_seq"], all_steps=False)[-1]
            s_state = self.student.backbone(*batch["student_global"])[:, 0]
            s_global = self.student.head(s_state)
            s_local = self.student.head(self.student.backbone(*batch["student_local"])[:, 0]).view(
                -1, b, t_global.shape[-1]
            )
            s_seq = self.sequence(self.student, *batch["student_seq"], all_steps=True)
        with torch.no_grad():
            q = sinkhorn_knopp(
                torch.cat([t_global, t_final]), o["teacher_temp"], o["sinkhorn_iterations"]
            )
            targets = q.view(2, b, -1).mean(0)
        temp, gw, sw = o["student_temp"], o["global_weight"], o["sequential_weight"]
        static = (
            gw * cross_entropy(targets, s_global, temp)
            + (1 - gw) * torch.stack([cross_entropy(targets, s, temp) for s in s_local]).mean()
        )
        sequential = torch.stack([cross_entropy(targets, s, temp) for s in s_seq]).mean()
        loss = (1 - sw) * static + sw * sequential + o["koleo_weight"] * koleo(s_state)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if o["clip_grad"] > 0:
            torch.nn.utils.clip_grad_norm_(
                self.trainable, o["clip_grad"], **({"foreach": True} if TORCH_2 else {})
            )
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_mul_(self.teacher_params, 0.992)
            torch._foreach_add_(self.teacher_params, self.student_params, alpha=0.008)
        return loss.item()


def synthetic_batch(step, batch, device, seed):
    """Normalised patches and positions of every view, already on the device."""
    g = torch.Generator().manual_seed(seed)
    o, v = step["backbone"], step["views"]
    d = o["channels"] * o["patch_size"] ** 2

    def views(n, tokens, pieces=None):
        shape = (n, tokens) if pieces is None else (pieces, n, tokens)
        return (
            torch.randn(*shape, d, generator=g).to(device),
            torch.rand(*shape, 3, generator=g).to(device),
        )

    return {
        "teacher_global": views(batch, v["global_tokens"]),
        "student_global": views(batch, v["global_tokens"]),
        "student_local": views(batch * v["local_views"], v["local_tokens"]),
        "teacher_seq": views(batch, v["glimpse_tokens"], v["glimpses"]),
        "student_seq": views(batch, v["glimpse_tokens"], v["glimpses"]),
    }


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def counted_flop_per_image(step, args):
    """The FLOPs one eager fp32 step of this script runs, per image (torch >= 2.1)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    torch.manual_seed(0)
    run = Step(step, args.device, "fp32")
    data = synthetic_batch(step, args.flop_check_batch, args.device, 0)
    with FlopCounterMode(display=False) as counter:
        run(data)
    return counter.get_total_flops() / args.flop_check_batch


def measure(step, args, variant, batches, flop_per_image):
    row = {"variant": f"torch {variant} {args.precision}", "batch": args.batch}
    device = torch.device(args.device)
    try:
        torch.manual_seed(0)
        run = Step(step, args.device, args.precision)
        if variant != "eager":
            run.compile(variant)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        losses = []
        start = time.perf_counter()
        for i in range(args.warmup):
            losses.append(run(batches[i % 2]))
        sync(args.device)
        row["warmup_s"] = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(args.steps):
            losses.append(run(batches[i % 2]))
        sync(args.device)
        seconds = time.perf_counter() - start
    except Exception as e:  # out of memory, a compiler failure: a row saying why, then the rest
        if device.type != "cuda":
            raise  # on a CPU a failure is a bug
        message = str(e)
        row["failure"] = (
            "out of device memory" if "out of memory" in message else message.splitlines()[0][:300]
        )
        return row
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row["images_per_second"] = args.batch * args.steps / seconds
    row["step_ms"] = 1e3 * seconds / args.steps
    row["tflops"] = flop_per_image * row["images_per_second"] / 1e12
    peak = step["peak_tflops"].get(args.precision) or 0
    row["mfu"] = row["tflops"] / peak if peak > 0 else None
    row["peak_device_memory_gib"] = (
        torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    )
    row["losses"] = losses
    row["failure"] = None
    return row


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step_json", help='the JSON of `saccade bench step --json` (its "step" object)')
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--variants", default="eager", help="eager, blocks, model, joined by ','")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    p.add_argument(
        "--flop-check-batch", type=int, default=2, help="images of the FLOP count; 0: none"
    )
    p.add_argument("--json", help="also write the rows here (rewritten after each variant)")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    for v in variants:
        if v not in ("eager", "blocks", "model"):
            p.error(f'--variants: unknown variant "{v}" (expected eager, blocks, model)')
    if args.batch < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--batch >= 1, --steps >= 1 and --warmup >= 0 expected")
    try:
        with open(args.step_json) as f:
            described = json.load(f)
        step = described["step"]
        flop_per_image = described["flop_per_image"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.error(
            f'{args.step_json}: not the JSON of `saccade bench step --json` with a "step" object ({e!r})'
        )
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    out = {
        "step_json": args.step_json,
        "torch": torch.__version__,
        "device": args.device,
        "device_name": (
            torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
        ),
        "precision": args.precision,
        "warmup": args.warmup,
        "steps": args.steps,
        "flop_per_image": flop_per_image,
        # Checked once, before anything runs: every Step builds this same Net.
        "parameters": check_same_model(Net(step), step),
        "rows": [],
    }
    out["counted_flop_per_image"] = (
        counted_flop_per_image(step, args) if args.flop_check_batch > 0 else None
    )
    print(
        f"torch_step: torch {out['torch']} on {out['device']} ({out['device_name']}), {out['parameters']:,} "
        f"parameters, {flop_per_image / 1e9:.1f} GFLOP per image (saccade's count)"
        + (
            f", {out['counted_flop_per_image'] / 1e9:.1f} counted by torch"
            if out["counted_flop_per_image"]
            else ""
        )
    )
    batches = [synthetic_batch(step, args.batch, args.device, seed) for seed in (1, 2)]
    for v in variants:
        row = measure(step, args, v, batches, flop_per_image)
        out["rows"].append(row)
        if row["failure"]:
            print(f"{row['variant']:<24} {args.batch:>6}  failed: {row['failure']}", flush=True)
        else:
            mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "-"
            print(
                f"{row['variant']:<24} {args.batch:>6} {row['images_per_second']:>9.1f} images/s "
                f"{row['step_ms']:>8.1f} ms {row['tflops']:>7.2f} TFLOP/s  MFU {mfu}  "
                f"warm-up {row['warmup_s']:.1f} s  loss {row['losses'][-1]:.4f}",
                flush=True,
            )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
    return 0 if all(not r["failure"] for r in out["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
