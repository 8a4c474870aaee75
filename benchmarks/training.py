"""Training throughput (image-caption pairs per second) at 1 and 2 processes, fp32 and bf16.

For each recipe (``pcme``, ``vsepp_max`` on the built-in shapes data, the recipes' model, loss and
global batch of 128) and each setting, the processes (gloo on CPU, started with
``torch.multiprocessing``, one thread each) build the trainer, run ``--warmup`` optimisation
steps, then time ``--steps`` steps (data loading included, as in training). Printed: pairs/s, the
2-process / 1-process ratio (scaling efficiency = ratio / 2) and bf16 / fp32, all measured in the
same run, with the machine's load before and after.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/training.py [--recipes pcme vsepp_max]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from pcmr.train import Trainer, load_config, save_config
from pcmr.train.distributed import shutdown_distributed
from pcmr.train.recipes import find_recipe


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, recipe: str, overrides: list[str], run_dir: str,
            warmup: int, steps: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    config = load_config(find_recipe(recipe), overrides)
    trainer = Trainer(config, Path(run_dir))
    trainer.model.train()
    batches = iter(trainer._epoch_loader(0, 0))
    for index in range(warmup + steps):
        if index == warmup:
            trainer.context.barrier()
            start = time.perf_counter()
        trainer._step(next(batches), 0, index)
    trainer.context.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        pairs = steps * config.data.batch_size
        Path(out).write_text(json.dumps({"pairs_per_s": pairs / elapsed, "seconds": elapsed}))
    shutdown_distributed()


def measure(recipe: str, world_size: int, precision: str, args: argparse.Namespace, cache: str) -> float:
    data = (f"data.options={{num_train: {args.images}, num_val: 8, num_test: 8, num_test_unseen: 1, "
            f"num_binary_selection: 1, cache_dir: {cache}}}")
    overrides = [data, f"train.precision={precision}", "train.progress=false", "train.validate_every=0",
                 f"data.batch_size={args.batch_size}"]
    with tempfile.TemporaryDirectory() as run_dir:
        save_config(load_config(find_recipe(recipe), overrides), Path(run_dir) / "config.yaml")
        out = os.path.join(run_dir, "result.json")
        mp.spawn(_worker, args=(world_size, _free_port(), recipe, overrides, run_dir, args.warmup, args.steps, out),
                 nprocs=world_size, join=True)
        return json.loads(Path(out).read_text())["pairs_per_s"]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--recipes", nargs="+", default=["pcme", "vsepp_max"])
    parser.add_argument("--images", type=int, default=256, help="shapes training images (5 captions each)")
    parser.add_argument("--batch-size", type=int, default=128, help="the global batch")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, one thread per process; before: {uptime()}")
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for recipe in args.recipes:
            result = {}
            for precision in ("fp32", "bf16"):
                for world_size in (1, 2):
                    result[precision, world_size] = measure(recipe, world_size, precision, args, cache)
                    print(f"  {recipe} {precision} {world_size} process(es): {result[precision, world_size]:.1f} pairs/s",
                          flush=True)
            rows.append((recipe, result))
    print(f"after: {uptime()}")
    print(f"\nglobal batch {args.batch_size}, {args.steps} timed steps after {args.warmup} warm-up steps")
    print("| recipe | precision | 1 process (pairs/s) | 2 processes (pairs/s) | 2 / 1 | efficiency | bf16 / fp32 (1 / 2 proc.) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for recipe, result in rows:
        for precision in ("fp32", "bf16"):
            one, two = result[precision, 1], result[precision, 2]
            vs = (f"{result['bf16', 1] / result['fp32', 1]:.2f} / {result['bf16', 2] / result['fp32', 2]:.2f}"
                  if precision == "bf16" else "")
            print(f"| {recipe} | {precision} | {one:.1f} | {two:.1f} | {two / one:.2f} | {two / one / 2:.0%} | {vs} |")


if __name__ == "__main__":
    main()
