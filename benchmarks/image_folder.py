"""Decoding real image files in the training loader: images/s with 0, 1, 2, ... worker processes.

A folder of ``--images`` generated 640x480 JPEGs (smooth colour fields with noise, quality 90, written to a
temporary folder) is read as a training split through the PCME release's COCO training transform
(``image_augment: random_resized_crop``, 224 px, then random erasing and word dropout), in batches of
``--batch-size``. Each setting reads ``--epochs`` whole epochs (worker start-up included, as in
training); printed per setting, medians over the epochs: images/s (wall clock), images/s per worker (0
workers: the training process decodes), the training process's own CPU time per image (what decoding in
workers takes off it) and the workers' CPU time per image (``RUSAGE_CHILDREN`` of the finished workers).
On a loaded machine the wall-clock figures follow the load; ``1000 / CPU ms per image`` is the rate one
worker sustains on a core of its own.

Run: ``OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/image_folder.py [--workers 0 1 2]``
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from pcmr.data import Vocabulary, train_loader
from pcmr.data.images import FileImages
from pcmr.data.split import RetrievalSplit

WIDTH, HEIGHT = 640, 480


def write_jpegs(folder: Path, count: int, seed: int = 0) -> list[str]:
    """``count`` 640x480 JPEGs: a random smooth colour field (upsampled 8x6 grid) plus pixel noise."""
    rng = np.random.default_rng(seed)
    paths = []
    for index in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8), mode="RGB")
        field = np.asarray(coarse.resize((WIDTH, HEIGHT), Image.Resampling.BICUBIC), dtype=np.int16)
        noisy = np.clip(field + rng.integers(-20, 21, field.shape), 0, 255).astype(np.uint8)
        path = folder / f"{index:05d}.jpg"
        Image.fromarray(noisy, mode="RGB").save(path, quality=90)
        paths.append(str(path))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_jpegs(Path(tmp), args.images)
        split = RetrievalSplit(name="jpegs", split="train", images=FileImages(paths, 224, image_resize="center_crop"),
                               caption_texts=[f"a picture of colour field number {i}" for i in range(len(paths))],
                               caption_image=np.arange(len(paths)))
        vocab = Vocabulary.from_split(split)
        rows = []
        for workers in args.workers:
            rates, cpu, child_cpu = [], [], []
            for epoch in range(args.epochs):
                loader = train_loader(split, vocab, args.batch_size, seed=0, num_workers=workers,
                                      image_augment="random_resized_crop", erase_prob=0.2,
                                      erase_ratio=[0.02, 0.3333333333], erase_aspect=0.3, word_dropout=0.1,
                                      word_dropout_rule="unk_then_delete", finish=False)
                loader.batch_sampler.epoch = epoch  # type: ignore[union-attr]
                children = resource.getrusage(resource.RUSAGE_CHILDREN)
                start, cpu_start, images = time.perf_counter(), time.process_time(), 0
                for batch in loader:
                    images += len(batch["images"])
                rates.append(images / (time.perf_counter() - start))
                cpu.append((time.process_time() - cpu_start) / images)
                del loader  # its workers have exited: their CPU time is in RUSAGE_CHILDREN
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                child_cpu.append((after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime) / images)
            rows.append((workers, statistics.median(rates), statistics.median(cpu), statistics.median(child_cpu)))
    print(f"{args.images} JPEGs {WIDTH}x{HEIGHT}, RandomResizedCrop 224 + flip, batch {args.batch_size}, "
          f"median of {args.epochs} epochs (worker start-up included)")
    print("| workers | images/s | images/s per worker | training process CPU ms / image | "
          "workers' CPU ms / image | images/s per worker, CPU-bound |")
    print("|---|---|---|---|---|---|")
    for workers, rate, cpu_per_image, worker_cpu in rows:
        decode = worker_cpu if workers else cpu_per_image
        print(f"| {workers} | {rate:.0f} | {rate / max(workers, 1):.0f} | {1e3 * cpu_per_image:.2f} | "
              f"{1e3 * worker_cpu:.2f} | {1 / decode:.0f} |")


if __name__ == "__main__":
    main()
