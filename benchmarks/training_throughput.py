"""Training throughput (pairs/s) of one recipe on the uncertainty study's data, with the GPU's utilisation.

Trains ``--recipe`` (default ``pcme_mu_only_exact``, the mu-only model of the study's data-learnable line)
with the uncertainty study's settings for that recipe (its shapes preset and image size, batch 128, Cutout and word
dropout where the recipe has them; the recipe's first variant and seed in the study) for ``--steps``
optimiser steps on ``--device``, logging every step. Reports:

- ``pairs/s``: caption-image pairs per second of the steps after the first ``--warmup`` (CUDA
  initialisation and cuDNN's algorithm search happen there), from the trainer's per-step times (data
  wait and compute together, as ``log.jsonl`` records them);
- on CUDA, the GPU utilisation and memory that ``nvidia-smi`` reports every ``--interval`` seconds
  while the command trains (mean and maximum; validation at the end of the epoch is included).

Usage::

    python benchmarks/training_throughput.py --device cuda [--steps 200] [--json out.json]
    python benchmarks/training_throughput.py --device cpu --quick      # a smoke run (small data, 4 steps)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

STUDY = "uncertainty"
#: settings of --quick: a small shapes set, so the data is generated in seconds on a CPU
QUICK = {"data.options.num_train": 64, "data.options.num_val": 16, "data.options.num_test": 16,
         "data.batch_size": 16, "data.eval_batch_size": 64}


def study_overrides(recipe: str, variant: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
    """``(recipe file, overrides)`` of the uncertainty study's run of ``recipe`` / ``variant`` / ``seed``
    (None: the recipe's first variant / seed in the study)."""
    from pcmr.study import find_study, load_study

    for run in load_study(find_study(STUDY)).runs():
        if run.label == recipe and variant in (None, run.variant) and seed in (None, run.seed):
            return run.recipe, dict(run.overrides)
    raise SystemExit(f"the {STUDY} study has no run {recipe}-{variant or '*'}-s{'*' if seed is None else seed}")


class UtilisationSampler:
    """``nvidia-smi`` sampled every ``interval`` s in a background process: GPU utilisation (%) and
    memory used (MiB) of the first GPU; empty where ``nvidia-smi`` is absent."""

    def __init__(self, interval: float) -> None:
        self.samples: list[tuple[float, float, float]] = []  # (time, utilisation %, memory MiB)
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self.interval = interval

    def __enter__(self) -> UtilisationSampler:
        if shutil.which("nvidia-smi") is None:
            return self
        self._process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
             "-i", "0", f"-lms={int(self.interval * 1000)}"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append((time.perf_counter(), float(parts[0]), float(parts[1])))
            except (ValueError, IndexError):
                continue

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"samples": 0}
        util = [s[1] for s in self.samples]
        return {"samples": len(util), "interval_s": self.interval, "util_mean": statistics.fmean(util),
                "util_max": max(util), "memory_max_mib": max(s[2] for s in self.samples)}


def throughput(log_path: Path, warmup: int) -> dict[str, Any]:
    """Pairs/s over the logged steps after ``warmup``: the pairs of those steps over the sum of their times."""
    steps = [json.loads(line) for line in log_path.read_text().splitlines()]
    steps = [s for s in steps if s.get("event") == "step"]
    timed = steps[warmup:] if len(steps) > warmup else steps
    seconds = [1.0 / s["pairs_per_s"] for s in timed]  # per pair; x batch = the step's time
    return {"steps": len(steps), "timed_steps": len(timed), "pairs_per_s": len(seconds) / sum(seconds)
            if seconds else float("nan")}


def measure(device: str, *, recipe: str = "pcme_mu_only_exact", steps: int = 200, warmup: int = 20,
            interval: float = 0.5, quick: bool = False, out: Path | None = None) -> dict[str, Any]:
    """Train and measure (see the module docstring); returns the figures as a dict."""
    from pcmr.study.backend import override_items
    from pcmr.train.lifecycle import start_run

    recipe_file, overrides = study_overrides(recipe)
    overrides.update({"train.device": device, "train.epochs": 1, "train.max_steps_per_epoch": steps,
                      "train.log_every": 1, "train.progress": False, **(QUICK if quick else {})})
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="pcmr-throughput-"))
    with UtilisationSampler(interval) as sampler:
        start = time.perf_counter()
        _, run_dir = start_run(recipe_file, override_items(overrides), out=folder, name="run")
        wall = time.perf_counter() - start
    figures = throughput(run_dir / "log.jsonl", min(warmup, max(0, steps - 2)))
    return {"recipe": recipe, "device": device, "batch_size": overrides.get("data.batch_size"),
            "image_size": overrides.get("data.options.image_size"), "wall_s": wall, **figures,
            "gpu": sampler.summary()}


def format_result(r: dict[str, Any]) -> str:
    line = (f"training throughput: {r['recipe']} on {r['device']} (uncertainty study settings, "
            f"{r['image_size']} px, batch {r['batch_size']}): {r['pairs_per_s']:,.0f} pairs/s over "
            f"{r['timed_steps']} steps after warm-up ({r['steps']} steps, {r['wall_s']:.0f} s wall)")
    gpu = r["gpu"]
    if gpu["samples"]:
        line += (f"; GPU utilisation mean {gpu['util_mean']:.1f} %, max {gpu['util_max']:.0f} % "
                 f"({gpu['samples']} samples every {gpu['interval_s']} s), memory max {gpu['memory_max_mib']:.0f} MiB")
    else:
        line += "; GPU utilisation: not sampled (no nvidia-smi)"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--recipe", default="pcme_mu_only_exact", help="a recipe label of the uncertainty study")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out of pairs/s")
    parser.add_argument("--interval", type=float, default=0.5, help="nvidia-smi sampling period (s)")
    parser.add_argument("--quick", action="store_true", help="small data (64 images), for a smoke run")
    parser.add_argument("--out", default=None, help="run folder parent (default: a temporary folder)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    result = measure(args.device, recipe=args.recipe, steps=args.steps, warmup=args.warmup,
                     interval=args.interval, quick=args.quick, out=Path(args.out) if args.out else None)
    print(format_result(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
