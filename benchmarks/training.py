"""Training throughput (image-caption pairs per second) at 1 and 2 processes, fp32 and bf16.

For each recipe (``pcme``, ``vsepp_max`` on the built-in shapes data, the recipes' model, loss and
global batch of 128) and each setting, the processes (gloo on CPU, started with
``torch.multiprocessing``, one thread each) build the trainer, run ``--warmup`` optimisation
steps, then time ``--steps`` steps (data loading included, as in training). Printed: pairs/s, the
2-process / 1-process ratio (scaling efficiency = ratio / 2), bf16 / fp32, and the CPU time all
processes spend per step (less sensitive than wall time to other jobs on the machine; the
2-process figure includes the work every process repeats: the loss on the global batch), all
measured in the same run, with the machine's load before and after.

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
            start, cpu_start = time.perf_counter(), time.process_time()
        trainer._step(next(batches), 0, index)
    cpu = time.process_time() - cpu_start  # before the barrier: this process's own work
    trainer.context.barrier()
    elapsed = time.perf_counter() - start
    pairs = steps * config.data.batch_size
    Path(f"{out}.{rank}").write_text(json.dumps({"pairs_per_s": pairs / elapsed, "cpu_per_step": cpu / steps}))
    shutdown_distributed()


def measure(recipe: str, world_size: int, precision: str, args: argparse.Namespace, cache: str) -> dict:
    """``{"pairs_per_s": wall-clock throughput, "cpu_per_step": CPU seconds of all processes per step}``."""
    data = (f"data.options={{num_train: {args.images}, num_val: 8, num_test: 8, num_test_unseen: 1, "
            f"num_binary_selection: 1, cache_dir: {cache}}}")
    overrides = [data, f"train.precision={precision}", "train.progress=false", "train.validate_every=0",
                 f"data.batch_size={args.batch_size}"]
    with tempfile.TemporaryDirectory() as run_dir:
        save_config(load_config(find_recipe(recipe), overrides), Path(run_dir) / "config.yaml")
        out = os.path.join(run_dir, "result.json")
        mp.spawn(_worker, args=(world_size, _free_port(), recipe, overrides, run_dir, args.warmup, args.steps, out),
                 nprocs=world_size, join=True)
        results = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(world_size)]
        return {"pairs_per_s": results[0]["pairs_per_s"], "cpu_per_step": sum(r["cpu_per_step"] for r in results)}


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
                    got = result[precision, world_size]
                    print(f"  {recipe} {precision} {world_size} process(es): {got['pairs_per_s']:.1f} pairs/s, "
                          f"{got['cpu_per_step']:.3f} CPU s per step", flush=True)
            rows.append((recipe, result))
    print(f"after: {uptime()}")
    print(f"\nglobal batch {args.batch_size}, {args.steps} timed steps after {args.warmup} warm-up steps")
    print("| recipe | precision | pairs/s, 1 process | pairs/s, 2 processes | 2 / 1 | efficiency (2 / 1 / 2) "
          "| CPU s per step, 1 / 2 processes | bf16 / fp32 pairs/s (1 / 2 proc.) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for recipe, result in rows:
        for precision in ("fp32", "bf16"):
            one, two = result[precision, 1]["pairs_per_s"], result[precision, 2]["pairs_per_s"]
            cpu = f"{result[precision, 1]['cpu_per_step']:.2f} / {result[precision, 2]['cpu_per_step']:.2f}"
            vs = ""
            if precision == "bf16":
                ratios = [result["bf16", n]["pairs_per_s"] / result["fp32", n]["pairs_per_s"] for n in (1, 2)]
                vs = f"{ratios[0]:.2f} / {ratios[1]:.2f}"
            print(f"| {recipe} | {precision} | {one:.1f} | {two:.1f} | {two / one:.2f} | {two / one / 2:.0%} "
                  f"| {cpu} | {vs} |")

if __name__ == "__main__":
    main()
