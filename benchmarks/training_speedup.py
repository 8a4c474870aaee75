"""Training speed before and after, in one run: pairs/s of a training step at the papers study's sizes.

The baseline is the code of an earlier commit (``--baseline``, default: the last commit before the
training speed-ups), exported with ``git archive`` into a temporary folder; the current tree is this
checkout. For every (tree, recipe, configuration) one worker process builds the trainer exactly as
``benchmarks/training_phases.py`` does (shapes ``hard``, 48 px, 1000 training images, global batch
128, one thread) and waits; the rounds then time ``--steps`` whole training steps in each worker in
turn (A, B, C, A, B, C, ...), so a slow phase of this noisy machine hits every configuration alike.
The figure is the median over ``--rounds`` of pairs per second (128 pairs per step).

Configurations: ``fp32`` (the default; results equal the baseline's up to float rounding) and
``bf16`` (``train.precision=bf16``: the towers under bfloat16 autocast, the loss in float32;
results within the tolerance stated in docs/training.md). A configuration is a comma-separated
list of ``--set`` overrides, or ``fp32`` for none; ``--before-configurations`` times the baseline
under several (its first is the reference every ratio is taken against), e.g. at the uncertainty
study's sizes: ``data.options.preset=multiplicity,data.options.image_size=32``.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/training_speedup.py [--recipes pcme vsepp_max]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
BASELINE = "e7c3f49"  # main before the fused uniformity term and channels-last convolutions
WORKER = BENCHMARKS / "_step_worker.py"


def export_tree(ref: str, into: Path) -> Path:
    """``src/`` of commit ``ref`` extracted under ``into``; returns that ``src`` folder."""
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


class Worker:
    """One trainer in its own process (``_step_worker.py``), timed on request."""

    def __init__(self, src: Path, recipe: str, configuration: str, cache: str) -> None:
        overrides = [] if configuration == "fp32" else configuration.split(",")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(BENCHMARKS)]), "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), recipe, cache, *overrides],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        self._read()  # "ready"

    def _read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark worker exited with code {self.process.wait()}")
        return line.strip()

    def seconds_per_step(self, steps: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{steps}\n")
        self.process.stdin.flush()
        return float(self._read())

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="git commit of the 'before' code")
    parser.add_argument("--recipes", nargs="+", default=["pcme", "vsepp_max"])
    parser.add_argument("--configurations", nargs="+", default=["fp32", "train.precision=bf16"],
                        help="configurations of the current tree")
    parser.add_argument("--before-configurations", nargs="+", default=["fp32"],
                        help="configurations of the baseline; the first is the reference of 'x before'")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=4, help="training steps timed per round")
    args = parser.parse_args()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"{os.cpu_count()} CPUs, one thread per worker; baseline {args.baseline}; before: {uptime}")
    with tempfile.TemporaryDirectory() as scratch:
        baseline_src = export_tree(args.baseline, Path(scratch))
        cache = str(Path(scratch) / "cache")
        labels: list[tuple[str, str, str]] = []
        workers: list[Worker] = []
        for recipe in args.recipes:
            for tree, src, configurations in (("before", baseline_src, args.before_configurations),
                                              ("after", ROOT / "src", args.configurations)):
                for configuration in configurations:
                    labels.append((recipe, tree, configuration))
                    workers.append(Worker(src, recipe, configuration, cache))
        times: list[list[float]] = [[] for _ in workers]
        for _ in range(args.rounds):
            for worker, record in zip(workers, times):
                record.append(worker.seconds_per_step(args.steps))
        for worker in workers:
            worker.close()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"after: {uptime}\n")
    print("| recipe | code | configuration | s / step (median) | pairs/s | x before |")
    print("|---|---|---|---:|---:|---:|")
    before: dict[str, float] = {}
    for (recipe, tree, configuration), record in zip(labels, times):
        step = statistics.median(record)
        before.setdefault(recipe, step)
        shown = configuration if configuration == "fp32" else f"`{configuration}`"
        print(f"| {recipe} | {tree} | {shown} | {step:.3f} | {128 / step:.0f} | {before[recipe] / step:.2f} |")


if __name__ == "__main__":
    main()
