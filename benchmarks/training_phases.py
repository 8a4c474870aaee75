"""Where a training step's time goes, per phase, at the papers study's sizes (one process, one thread).

For each recipe the trainer is built on the shapes ``hard`` preset (48 px, 1000 training images,
global batch 128, as ``studies/papers.yaml``), and each phase of a step is timed on the same batches
(median of ``--repeats``): drawing a batch from the loader, the image tower and the caption tower
(forward + backward of their outputs), the loss (forward + backward on fixed embeddings), the
optimiser step, and the whole step as the trainer runs it. The phases do not add up to the step
exactly (the step's backward runs through towers and loss at once), but their shares show where a
speed-up must come from.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/training_phases.py [--recipes pcme vsepp_max]
[--set KEY=VALUE ...]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from _measure import timed
from pcmr.data.batching import finish_batch
from pcmr.gaussian import Gaussian
from pcmr.train import Trainer, load_config
from pcmr.train.recipes import find_recipe

STUDY_SIZES = ["data.options.preset=hard", "data.options.image_size=48", "data.options.num_train=1000",
               "data.options.num_val=8", "data.options.num_test=8", "data.options.num_test_unseen=0",
               "data.options.num_binary_selection=1", "data.batch_size=128", "train.progress=false",
               "train.validate_every=0", "data.train_relevance=exact"]


def _median_seconds(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    return timed(fn, repeats)


def _backward(value: Any) -> None:
    tensors = [value.mean] + ([value.logvar] if isinstance(value, Gaussian) and value.logvar is not None else [])
    sum(t.float().sum() for t in tensors).backward()


def phases(recipe: str, repeats: int, cache: str, overrides: tuple[str, ...] = ()) -> dict[str, float]:
    """Median seconds of each phase of a step of ``recipe`` (see the module docstring), with ``overrides``
    (``KEY=VALUE``) applied after the study sizes."""
    config = load_config(find_recipe(recipe), [*STUDY_SIZES, f"data.options.cache_dir={cache}", *overrides])
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(config, Path(run_dir))
        model, loss_fn = trainer.model, trainer.loss_fn
        model.train()
        loader = iter(trainer._epoch_loader(0, 0))
        # a batch as the step sees it: drawn, then its images normalised and erased (finish_batch)
        batches = [finish_batch(next(loader)) for _ in range(repeats + 2)]
        out: dict[str, float] = {"batch": _median_seconds(lambda: finish_batch(next(loader)), repeats)}
        batch = batches[0]
        out["image tower"] = _median_seconds(lambda: _backward(model.encode_images(batch)), repeats)
        out["caption tower"] = _median_seconds(lambda: _backward(model.encode_captions(batch)), repeats)
        with torch.no_grad():
            outputs = model(batch)
        fixed = {k: (Gaussian(v.mean.detach().requires_grad_(), None if v.logvar is None
                              else v.logvar.detach().requires_grad_()) if isinstance(v, Gaussian) else v)
                 for k, v in outputs.items()}
        positives = batch["relevance"]
        out["loss"] = _median_seconds(lambda: loss_fn(**fixed, positives=positives)["loss"].backward(), repeats)
        out["optimiser step"] = _median_seconds(trainer.optimizer.step, repeats)
        counter = iter(range(1, 10**6))
        out["whole step"] = _median_seconds(lambda: trainer._step(batches[next(counter) % len(batches)], 0, 0),
                                            repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["pcme", "vsepp_max"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides after the study sizes, e.g. data.options.image_size=32")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, one thread; before: {load}")
    with tempfile.TemporaryDirectory() as cache:
        results = {recipe: phases(recipe, args.repeats, cache, tuple(args.set)) for recipe in args.recipes}
    print(f"after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    names = list(next(iter(results.values())))
    print("\n| recipe | " + " | ".join(f"{n} (s)" for n in names) + " | pairs/s (whole step) |")
    print("|---|" + "---:|" * (len(names) + 1))
    for recipe, times in results.items():
        step = times["whole step"]
        cells = [f"{times[n]:.3f} ({100 * times[n] / step:.0f} %)" for n in names]
        print(f"| {recipe} | " + " | ".join(cells) + f" | {128 / step:.0f} |")


if __name__ == "__main__":
    main()
