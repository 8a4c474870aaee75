"""Worker of ``benchmarks/training_speedup.py``: builds one trainer, then times training steps on request.

Usage (by the benchmark, with ``PYTHONPATH`` set to the code under test): ``_step_worker.py RECIPE
CACHE_DIR [KEY=VALUE ...]``. Prints ``ready``; then, for each line ``N`` read from stdin, runs ``N``
training steps on pre-drawn batches and prints the mean seconds per step. Every batch runs once before
the first timing, so a feature cache (``train.cache_frozen_features=true``) is timed as from the second
epoch on.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from pcmr.train import Trainer, load_config
from pcmr.train.recipes import find_recipe
from training_phases import STUDY_SIZES


def main() -> None:
    recipe, cache, *overrides = sys.argv[1:]
    torch.set_num_threads(1)
    config = load_config(find_recipe(recipe), [*STUDY_SIZES, f"data.options.cache_dir={cache}", *overrides])
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(config, Path(run_dir))
        trainer.model.train()
        loader = iter(trainer._epoch_loader(0, 0))
        batches = [next(loader) for _ in range(8)]
        for batch in batches:  # warm-up: every batch once (and, with train.cache_frozen_features, cached)
            trainer._step(batch, 0, 0)
        print("ready", flush=True)
        done = 0
        for line in sys.stdin:
            steps = int(line)
            start = time.perf_counter()
            for _ in range(steps):
                trainer._step(batches[done % len(batches)], 0, 0)
                done += 1
            print((time.perf_counter() - start) / steps, flush=True)


if __name__ == "__main__":
    main()
