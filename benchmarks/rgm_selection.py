"""RGM at evaluation sizes: lambda selection on a validation split, then test lists, whole matrix vs lazy stream.

The study's evaluation re-ranks with ``csls+rgm``: for every score and relevance mode it selects
lambda on the validation split (every lambda of the grid x every K of R@K, both directions) and then
ranks the test split. These matrices are small (validation 1,000 captions x 200 images, test
2,500 x 500), where the lazy candidate stream (built for COCO-5K-sized matrices, see
``benchmarks/inference.py``) spends its time in refill round trips. Matrices of at most
``pcmr.inference._stream.WHOLE_FETCH_ENTRIES`` entries are now put in the global order whole once (one
sort of the flattened matrix, kept for the next matching of the same tensor) and scanned linearly
(earlier: each row sorted whole, then merged by a heap). This script times the lazy stream and the
default in one process, alternating
(``lazy``: ``WHOLE_FETCH_ENTRIES = 0``, the previous behaviour), on cosine scores of clustered
synthetic embeddings, and checks that the lists are identical.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rgm_selection.py``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import torch

import pcmr.inference._stream as stream
from pcmr.inference import get_reranker, select_lambda


def clustered(num: int, dim: int, centres: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Unit vectors near random cluster centres (hubs form around the large clusters)."""
    which = torch.randint(centres.shape[0], (num,), generator=generator)
    points = centres[which] + 0.7 * torch.randn(num, dim, generator=generator) / dim**0.5
    return torch.nn.functional.normalize(points, dim=1)


def workload(scores: dict[str, torch.Tensor], relevant: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Lambda selection on both validation directions, then test lists with the selected lambdas."""
    reranker = get_reranker("csls+rgm")
    lists = []
    for direction in ("i2t", "t2i"):
        val = scores[f"val_{direction}"]
        chosen = select_lambda(val, relevant[direction], method=reranker.fitted(tuple(val.shape)))
        test = scores[f"test_{direction}"]
        tuned = reranker.fitted(tuple(test.shape)).with_parameters(lam=chosen.best_lam)
        lists.append(tuned.topk(test, 10))
    return lists


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    dim = 128
    centres = torch.randn(40, dim, generator=generator) / dim**0.5
    scores, relevant = {}, {}
    for split, images in (("val", 200), ("test", 500)):
        image_emb = clustered(images, dim, centres, generator)
        caption_emb = clustered(5 * images, dim, centres, generator)
        scores[f"{split}_i2t"] = image_emb @ caption_emb.T  # [images, captions]
        scores[f"{split}_t2i"] = scores[f"{split}_i2t"].T.contiguous()
        if split == "val":  # caption c belongs to image c // 5
            owner = torch.arange(5 * images) // 5
            relevant["i2t"] = owner.unsqueeze(0) == torch.arange(images).unsqueeze(1)
            relevant["t2i"] = relevant["i2t"].T.contiguous()
    default_limit = stream.WHOLE_FETCH_ENTRIES
    times: dict[str, list[float]] = {"lazy": [], "whole": []}
    outputs: dict[str, list[torch.Tensor]] = {}
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    for _ in range(args.rounds):
        for name, limit in (("lazy", 0), ("whole", default_limit)):
            stream.WHOLE_FETCH_ENTRIES = limit
            stream._last_whole_sort.clear()
            stream._last_global_order.clear()
            start = time.perf_counter()
            outputs[name] = workload(scores, relevant)
            times[name].append(time.perf_counter() - start)
    stream.WHOLE_FETCH_ENTRIES = default_limit
    same = all(torch.equal(a, b) for a, b in zip(outputs["lazy"], outputs["whole"]))
    lazy, whole = statistics.median(times["lazy"]), statistics.median(times["whole"])
    print(f"one thread; before: {load}")
    print("\n| workload | lazy stream (s) | whole matrix (s) | speed-up | identical lists |")
    print("|---|---:|---:|---:|---|")
    print(f"| csls+rgm: lambda selection (val 200 x 1000, both directions) + test lists (500 x 2500) "
          f"| {lazy:.2f} | {whole:.2f} | {lazy / whole:.2f}x | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
