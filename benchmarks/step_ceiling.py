"""A training step's CPU time against its network alone, per study recipe, at the papers study's sizes.

For each recipe a fresh trainer is built at the papers study's sizes (48 px, batch 128, the recipe's
study settings; ``pcme_small_init`` is ``pcme`` with its variance heads started at logvar -8, ``pcme``
is the recipe as released), and two things are timed in CPU seconds (one thread), interleaved step
by step on the same batches from its first step on (its first epoch):

- **step**: the trainer's whole step (batch finishing, model, loss, backward, optimiser);
- **network alone**: the ceiling: forward and backward of the same model on the finished batch, with
  the sum of its outputs as the loss, and a plain SGD step over the same parameters;
- **network and loss**: forward and backward of the model and the recipe's loss on the finished batch
  (as the step computes them) and a plain SGD step.

The ratio step / network alone is what the loss, the optimiser and the batch finishing add; step /
(network and loss) what the optimiser, the batch finishing and the trainer's bookkeeping add. Then,
as same-run baselines of the parts the ratio depends on:

- the optimiser step of ``pcme``'s parameters: pcmr's AdamP against the ``adamp`` package's (same
  gradients) and against SGD;
- batch finishing of a 64 px and a 48 px batch of 128 images: the channels-last arithmetic against the
  earlier per-channel look-up table written channels-first plus the CNN's copy to channels-last;
- PCME's uniformity term on the first batch of ``pcme`` (untrained, as released): the share of the
  products weight x coordinate of its backward that are subnormal floats, with the weights dropped
  below the cutoff (now) and floored at the smallest normal float (before), and the backward's
  product timed both ways, with subnormals flushed to zero as the reference
  (``torch.set_flush_denormal``, here only; on CPUs without a subnormal penalty, such as AMD EPYC,
  the times agree);
- start-up: a fresh interpreter importing pcmr, building a trainer and taking one step, CPU seconds,
  against the same with ``torch._dynamo`` imported first (which torch's optimisers did at their first use);
- the uniformity term's forward and backward at ``pcme``'s size against its two matrix products;
- ``--later-steps N``: the ``pcme`` step again after N training steps (N = 5 x steps per epoch:
  its fifth epoch), against the first epoch's.

Run: ``OMP_NUM_THREADS=1 python benchmarks/step_ceiling.py [--recipes ...] [--repeats 7] [--later-steps 0]``
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pcmr.data.batch_augment import finish_images
from pcmr.data.batching import finish_batch
from pcmr.data.images import IMAGE_MEAN, IMAGE_STD
from pcmr.gaussian import Gaussian
from pcmr.losses.regularisers import _underflow_cutoff, uniformity_loss
from pcmr.train import Trainer, load_config
from pcmr.train.optimizers import SGD
from pcmr.train.recipes import find_recipe

STUDY_SIZES = ["data.options.preset=specific", "data.options.image_size=48", "data.options.num_train=1000",
               "data.options.num_val=8", "data.options.num_test=8", "data.options.num_test_unseen=0",
               "data.options.num_binary_selection=0", "data.batch_size=128", "train.progress=false",
               "train.validate_every=0", "data.train_relevance=source"]

#: the papers study's recipes (its learning rates do not change a step's cost); name -> (recipe, settings)
RECIPES: dict[str, tuple[str, list[str]]] = {
    "vsepp_max": ("vsepp_max", []),
    "hal": ("hal", []),
    "probvse_wasserstein_ellipsoidal": ("probvse_wasserstein_ellipsoidal", []),
    "pcme_mu_only": ("pcme_mu_only", []),
    "pcme_small_init": ("pcme", ["model.image_head.logvar_init=-8", "model.caption_head.logvar_init=-8"]),
    "pcme": ("pcme", []),
}


def cpu_seconds(fn: Callable[..., object], *args: Any) -> float:
    """CPU seconds of ``fn(*args)``."""
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def build(name: str, cache: str, run_dir: str) -> tuple[Trainer, list[dict[str, Any]]]:
    recipe, settings = RECIPES[name]
    config = load_config(find_recipe(recipe), [*STUDY_SIZES, f"data.options.cache_dir={cache}", *settings])
    trainer = Trainer(config, Path(run_dir))
    trainer.model.train()
    loader = iter(trainer._epoch_loader(0, 0))
    return trainer, [next(loader) for _ in range(8)]


def output_sum(outputs: dict[str, Any]) -> torch.Tensor:
    tensors = [t for v in outputs.values() if isinstance(v, Gaussian)
               for t in (v.mean, v.logvar) if t is not None and t.requires_grad]
    return sum((t.float().sum() for t in tensors), torch.zeros(()))


def step_against_ceiling(name: str, repeats: int, cache: str) -> dict[str, float]:
    """Median CPU seconds of the whole step and of the network alone, interleaved, from the first step."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, raw = build(name, cache, run_dir)
        trainable = [p for p in trainer.model.parameters() if p.requires_grad]
        sgd = SGD(trainable, lr=1e-7)
        with_loss = SGD([*trainable, *(p for p in trainer.loss_fn.parameters() if p.requires_grad)], lr=1e-7)
        finished = [finish_batch(b) for b in raw]

        def ceiling(batch: dict[str, Any]) -> None:
            sgd.zero_grad(set_to_none=True)
            output_sum(trainer.model(batch)).backward()
            sgd.step()

        def ceiling_with_loss(batch: dict[str, Any], index: int) -> None:
            with_loss.zero_grad(set_to_none=True)
            trainer.train_step(batch, loss_seed=index)["loss"].backward()
            with_loss.step()

        times: dict[str, list[float]] = {"step": [], "alone": [], "with loss": []}
        for index in range(repeats + 1):  # the first of each is a warm-up
            k = index % len(raw)
            times["step"].append(cpu_seconds(trainer._step, raw[k], 0, index))
            times["alone"].append(cpu_seconds(ceiling, finished[k]))
            times["with loss"].append(cpu_seconds(ceiling_with_loss, finished[k], index))
        return {**{name: statistics.median(values[1:]) for name, values in times.items()},
                "first step": times["step"][0]}


def later_epoch(later: int, repeats: int, cache: str) -> dict[str, float]:
    """``pcme``'s step in its first epoch, then after ``later`` training steps (interleaved with the ceiling)."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, raw = build("pcme", cache, run_dir)
        first = statistics.median(cpu_seconds(trainer._step, raw[i % 8], 0, i) for i in range(repeats))
        loader = iter(trainer._epoch_loader(1, 0))
        for index in range(later):
            try:
                batch = next(loader)
            except StopIteration:
                loader = iter(trainer._epoch_loader(2 + index, 0))
                batch = next(loader)
            trainer._step(batch, 1, index)
        late = statistics.median(cpu_seconds(trainer._step, raw[i % 8], 4, i) for i in range(repeats))
        return {"first": first, "later": late, "steps per epoch": float(trainer.steps_per_epoch)}


def optimiser_steps(cache: str, repeats: int) -> dict[str, float]:
    """pcmr's AdamP, the adamp package's and SGD over pcme's parameters, with the same gradients."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, raw = build("pcme", cache, run_dir)
        trainer._step(raw[0], 0, 0)  # gradients in place
        params = [p for g in trainer.optimizer.param_groups for p in g["params"] if p.grad is not None]
        saved = [p.detach().clone() for p in params]
        import adamp  # the reference (its first use imports torch._dynamo)

        optimisers = {"pcmr AdamP": trainer.optimizer, "adamp package": adamp.AdamP(params, lr=1e-4),
                      "SGD": SGD(params, lr=1e-4)}
        times: dict[str, list[float]] = {name: [] for name in optimisers}
        for _ in range(repeats + 1):
            for name, optimizer in optimisers.items():
                times[name].append(cpu_seconds(optimizer.step))
                for p, value in zip(params, saved, strict=True):
                    p.data.copy_(value)
        return {name: statistics.median(values[1:]) for name, values in times.items()}


def _table_channels_first(images: torch.Tensor) -> torch.Tensor:
    """The earlier finishing: a per-channel table of the 256 levels, written channels-first."""
    levels = torch.arange(256, dtype=torch.float32).div_(255.0).view(1, 256)
    table = ((levels - torch.tensor(IMAGE_MEAN).view(3, 1)) / torch.tensor(IMAGE_STD).view(3, 1)).numpy()
    pixels = images.numpy()
    out = np.empty((*pixels.shape[:-3], 3, *pixels.shape[-3:-1]), dtype=np.float32)
    for channel in range(3):
        out[..., channel, :, :] = table[channel][pixels[..., channel]]
    return torch.from_numpy(out)


def _into_cnn_layout(finish: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    return finish(images).contiguous(memory_format=torch.channels_last)  # what the CNN reads


def finishing(repeats: int) -> dict[int, tuple[float, float]]:
    """CPU seconds to finish a batch of 128 images into the CNN's layout, earlier way and now, per size."""
    out = {}
    for size in (64, 48):
        images = torch.randint(0, 256, (128, size, size, 3), dtype=torch.uint8)
        before, now = [], []
        for _ in range(repeats + 1):
            before.append(cpu_seconds(_into_cnn_layout, _table_channels_first, images))
            now.append(cpu_seconds(_into_cnn_layout, finish_images, images))
        out[size] = (statistics.median(before[1:]), statistics.median(now[1:]))
    return out


def uniformity_weights(points: torch.Tensor, dropped: bool) -> torch.Tensor:
    """The uniformity term's softmax weights ``[N, N]`` (the loss's forward), its small ones dropped
    (now) or floored at the smallest normal float (before)."""
    weights = -2.0 * torch.cdist(points, points).pow(2)
    weights.fill_diagonal_(float("-inf"))
    weights.sub_(weights.max())
    if dropped:
        weights = torch.where(weights > _underflow_cutoff(weights.dtype), weights, float("-inf"))
    else:
        weights.clamp_(min=math.log(torch.finfo(weights.dtype).tiny) + 1.0).fill_diagonal_(float("-inf"))
    weights = weights.exp()
    return weights / weights.sum()


def subnormals(cache: str, repeats: int) -> dict[str, tuple[float, float, float]]:
    """Per form: share of subnormal products in the backward, its product's CPU seconds, and the same with
    subnormals flushed (pcme's first batch)."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, raw = build("pcme", cache, run_dir)
        with torch.no_grad():
            outputs = trainer.model(finish_batch(raw[0]))
        generator = torch.Generator().manual_seed(0)
        num = trainer.loss_fn.config.num_samples
        samples = torch.cat([outputs[k].sample(num, generator=generator).flatten(0, 1)
                             for k in ("image", "caption")])  # [N, D]: the points of the uniformity term
        tiny = torch.finfo(samples.dtype).tiny
        result = {}
        for label, dropped in (("now (dropped)", True), ("before (floored)", False)):
            weights = uniformity_weights(samples, dropped)
            rows = weights[:: max(1, weights.shape[0] // 64)]  # a sample of rows
            products = (rows.unsqueeze(2) * samples.unsqueeze(0)).abs()
            share = float(((products > 0) & (products < tiny)).double().mean())
            plain = statistics.median(cpu_seconds(torch.mm, weights, samples) for _ in range(repeats))
            torch.set_flush_denormal(True)
            try:
                flushed = statistics.median(cpu_seconds(torch.mm, weights, samples) for _ in range(repeats))
            finally:
                torch.set_flush_denormal(False)
            result[label] = (share, plain, flushed)
        return result


def exp_times(repeats: int) -> dict[str, float]:
    """CPU seconds of ``exp`` over a ``[1750, 1750]`` float32 matrix whose exponents all are one value:
    a normal result, a subnormal one, and ``-inf`` (an exact 0)."""
    out = {}
    for label, value in (("-3 (normal result)", -3.0), ("-44.7 (normal, the cutoff)", -44.7),
                         ("-100 (subnormal result)", -100.0), ("-inf (0)", float("-inf"))):
        exponents = torch.full((1750, 1750), value)
        out[label] = statistics.median(cpu_seconds(torch.exp, exponents) for _ in range(repeats))
    return out


def uniformity_floor(repeats: int, num: int = 1750, dim: int = 128) -> tuple[float, float]:
    """CPU seconds of the uniformity term's forward and backward over ``num`` points (``pcme`` at these sizes:
    (122 + 128) x 7 samples of 128 dimensions) and of its two matrix products alone (the floor)."""
    points = torch.randn(num, dim, generator=torch.Generator().manual_seed(0))
    wide = torch.randn(num, dim + 2)

    def term() -> None:
        leaf = points.clone().requires_grad_()
        uniformity_loss(leaf, 2.0).backward()

    def products() -> None:
        weights = wide @ wide.t()  # [N, N]
        weights @ points  # [N, D]

    times: dict[str, list[float]] = {"term": [], "products": []}
    for _ in range(repeats + 1):
        times["term"].append(cpu_seconds(term))
        times["products"].append(cpu_seconds(products))
    return statistics.median(times["term"][1:]), statistics.median(times["products"][1:])


_STARTUP = """
import resource, sys, tempfile
from pathlib import Path
if {dynamo}:
    import torch._dynamo  # what the first optimiser step loaded before
from pcmr.train import Trainer, load_config
from pcmr.train.recipes import find_recipe
with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as run:
    config = load_config(find_recipe("{recipe}"), {sizes} + ["data.options.cache_dir=" + cache,
                         "data.options.num_train=64", "data.batch_size=32"])
    trainer = Trainer(config, Path(run))
    trainer._step(next(iter(trainer._epoch_loader(0, 0))), 0, 0)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, "torch._dynamo" in sys.modules)
"""


def startup(recipe: str, repeats: int) -> dict[str, float]:
    """CPU seconds of a fresh interpreter that imports pcmr, builds ``recipe``'s trainer and takes one step,
    as now and with ``torch._dynamo`` imported first (what the first optimiser step cost before)."""
    out: dict[str, list[float]] = {"now": [], "with torch._dynamo": []}
    for _ in range(repeats):
        for label, dynamo in (("now", False), ("with torch._dynamo", True)):
            code = _STARTUP.format(dynamo=dynamo, recipe=recipe, sizes=repr(STUDY_SIZES))
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    env={**os.environ, "OMP_NUM_THREADS": "1"})
            seconds, loaded = result.stdout.split()
            if label == "now" and loaded == "True":
                raise RuntimeError("torch._dynamo was loaded by one step")
            out[label].append(float(seconds))
    return {label: statistics.median(values) for label, values in out.items()}


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    return f"{model}, {os.cpu_count()} CPUs, torch {torch.__version__}, one thread"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="*", default=list(RECIPES), choices=list(RECIPES),
                        help="recipes whose step to time (none: only the parts)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--later-steps", type=int, default=0,
                        help="also time pcme's step after this many training steps (0: skip)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    uptime = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    print(f"{machine()}; before: {uptime()}")
    with tempfile.TemporaryDirectory() as cache:
        results = {name: step_against_ceiling(name, args.repeats, cache) for name in args.recipes}
        if results:
            print(f"torch._dynamo loaded by the training steps: {'torch._dynamo' in sys.modules}")
            print("\n| recipe | step (ms CPU) | network alone + SGD (ms CPU) | step / network | network and loss + SGD"
                  " (ms CPU) | step / (network and loss) | first step (ms CPU) |")
            print("|---|---:|---:|---:|---:|---:|---:|")
        for name, r in results.items():
            print(f"| {name} | {1e3 * r['step']:.0f} | {1e3 * r['alone']:.0f} | {r['step'] / r['alone']:.2f}x "
                  f"| {1e3 * r['with loss']:.0f} | {r['step'] / r['with loss']:.2f}x | {1e3 * r['first step']:.0f} |")
        if args.later_steps:
            late = later_epoch(args.later_steps, args.repeats, cache)
            print(f"\npcme step, first epoch {1e3 * late['first']:.0f} ms, after {args.later_steps} steps "
                  f"({args.later_steps / late['steps per epoch']:.1f} epochs) {1e3 * late['later']:.0f} ms: "
                  f"first / later {late['first'] / late['later']:.2f}")
        finish = finishing(args.repeats * 3)
        print("\n| finishing 128 images into channels-last | before: table, channels-first, copy (ms) | now (ms) |"
              " speed-up |")
        print("|---|---:|---:|---:|")
        for size, (before, now) in finish.items():
            print(f"| {size} px | {1e3 * before:.2f} | {1e3 * now:.2f} | {before / now:.1f}x |")
        unif = subnormals(cache, args.repeats)
        print("\n| uniformity weights (pcme, first batch) | subnormal products | W @ X (ms CPU) | flushed (ms CPU) |")
        print("|---|---:|---:|---:|")
        for label, (share, plain, flushed) in unif.items():
            print(f"| {label} | {100 * share:.1f} % | {1e3 * plain:.1f} | {1e3 * flushed:.1f} |")
        for recipe in ("vsepp_max", "pcme"):
            start = startup(recipe, 3)
            print(f"\nstart-up of {recipe} (import, build, one step; fresh interpreter, median of 3): "
                  f"{start['now']:.2f} s CPU; with torch._dynamo imported {start['with torch._dynamo']:.2f} s")
        exps = exp_times(args.repeats)
        print("\n| exp over 1750 x 1750 exponents equal to | ms CPU |")
        print("|---|---:|")
        for label, seconds in exps.items():
            print(f"| {label} | {1e3 * seconds:.1f} |")
        term, floor = uniformity_floor(args.repeats)
        print(f"\nuniformity term, forward + backward over 1750 x 128 points: {1e3 * term:.1f} ms CPU; its two "
              f"matrix products alone {1e3 * floor:.1f} ms ({term / floor:.2f}x)")
        steps = optimiser_steps(cache, args.repeats)
        print("\n| optimiser step over pcme's parameters | ms CPU | vs pcmr AdamP |")
        print("|---|---:|---:|")
        for name, seconds in steps.items():
            print(f"| {name} | {1e3 * seconds:.2f} | {seconds / steps['pcmr AdamP']:.2f}x |")
    print(f"\nafter: {uptime()}")


if __name__ == "__main__":
    main()
