"""Cost of the uncertainty study's null of untrained models, per initialisation.

    python benchmarks/study_null.py [--inits 4] [--threads 1]

Trains a throwaway run of the study's `pcme_small_init` configuration for two steps (its model options and
vocabulary are all the null reads), then times ``pcmr.study.backend.null_statistics`` on the study's test
split: every statistic the claims read, and the same without the corruption slopes (the occlusion and
word-erasure series), measured in the same process. Prints seconds per initialisation and what the
study's ``untrained_null`` (inits x recipes) costs at that rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from pcmr.study import backend, find_study, load_study
from pcmr.study.steps import null_recipes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inits", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = load_study(find_study("uncertainty"))
    run = next(r for r in spec.runs() if r.label == "pcme_small_init" and r.variant == "source")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        backend.train_run(run.recipe, {**run.overrides, "train.epochs": 1, "train.max_steps_per_epoch": 2}, run_dir)
        backend.null_statistics(run_dir, spec.relevance, spec.analysis, [0])  # warm-up: split cache, kernels
        seeds = list(range(1, 1 + args.inits))
        timings = {}
        for name, analysis in (("all statistics", spec.analysis),
                               ("without the corruption slopes", dataclasses.replace(spec.analysis, corruption=False))):
            start = time.perf_counter()
            backend.null_statistics(run_dir, spec.relevance, analysis, seeds)
            timings[name] = (time.perf_counter() - start) / len(seeds)
    null = spec.design.null
    recipes = len(null_recipes(spec))
    for name, seconds in timings.items():
        print(f"{name}: {seconds:.2f} s per initialisation ({args.threads} thread)")
    total = timings["all statistics"] * (null.inits if null else 0) * recipes
    print(f"ratio all / without corruption: {timings['all statistics'] / timings['without the corruption slopes']:.2f}x")
    print(f"the study's null: {null.inits if null else 0} inits x {recipes} recipes = {total / 60:.1f} min")


if __name__ == "__main__":
    main()
