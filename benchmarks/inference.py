"""Speed of pcmr.inference at COCO 5K size: streamed RGM / GM against the literal full sort, and IS / CSLS.

Scores are cosine similarities of synthetic embeddings shaped like COCO 5K test (5,000 images, 5
captions each). Both directions: image->text ``S [5000, 25000]`` and text->image ``S.T [25000, 5000]``.
A third case puts two "anti-hub" images (scored last by every caption) into text->image, which
forces the scan down to the bottom of the matrix. The literal baseline is HAL/RGM Algorithm 1 as written: one stable sort of all ``Q x G`` entries
(torch, multi-threaded), then the same scan compiled with numba (stopping as soon as every row or
every column is full), then the same completion of short rows (``pcmr.inference.ordered_topk``).
Outputs are checked to be identical.

Run: ``flock /tmp/pcmr-bench.lock .venv/bin/python benchmarks/inference.py`` (prints a Markdown table;
``--no-literal`` skips the baseline, e.g. to compare two revisions of pcmr's own methods).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import time

import numba
import numpy as np
import torch

import pcmr.inference._stream as stream
from pcmr.inference import csls, greedy_matching, inverted_softmax, ordered_topk, relaxed_greedy_matching


@numba.njit(cache=True)
def _literal_scan(order, num_cols, num_rows, k, capacity, accepted, row_count):
    col_count = np.zeros(num_cols, dtype=np.int64)
    full_rows = 0
    full_cols = 0
    for index in range(order.shape[0]):
        if full_rows == num_rows or full_cols == num_cols:
            break
        flat = order[index]
        q = flat // num_cols
        g = flat - q * num_cols
        if row_count[q] < k and col_count[g] < capacity:
            accepted[q, row_count[q]] = g
            row_count[q] += 1
            col_count[g] += 1
            if row_count[q] == k:
                full_rows += 1
            if col_count[g] == capacity:
                full_cols += 1


def literal_rgm(scores: torch.Tensor, k: int, capacity: int, complete: bool = True) -> torch.Tensor:
    """Algorithm 1 literally: stable descending sort of every entry, scan, then complete short rows."""
    num_rows, num_cols = scores.shape
    order = torch.sort(scores.reshape(-1), descending=True, stable=True).indices.numpy()  # [Q * G]
    accepted = np.full((num_rows, k), -1, dtype=np.int64)
    row_count = np.zeros(num_rows, dtype=np.int64)
    _literal_scan(order, num_cols, num_rows, k, capacity, accepted, row_count)
    del order
    if complete:  # the same (vectorised) completion as the library, from each short row's exact top-k
        short = np.flatnonzero(row_count < k)
        row_top = np.zeros((num_rows, k), dtype=np.int64)
        row_top[short] = ordered_topk(scores[torch.from_numpy(short)], k).numpy()
        accepted = stream.complete_rows(accepted, row_count, row_top)
    return torch.from_numpy(accepted)


def coco_like_scores(seed: int = 0, dim: int = 256, noise: float = 1.2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    images = torch.nn.functional.normalize(torch.randn(5000, dim, generator=gen), dim=1)
    captions = images.repeat_interleave(5, dim=0) + noise * torch.randn(25000, dim, generator=gen) / dim**0.5
    return images @ torch.nn.functional.normalize(captions, dim=1).T  # [5000, 25000]


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each fast method (median reported)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--lam", type=float, default=2.0)
    parser.add_argument("--no-literal", action="store_true",
                        help="skip the literal full-sort baseline (minutes, ~5 GB): time pcmr's methods only")
    args = parser.parse_args()
    capacity = round(args.lam * args.k)
    relaxed_greedy_matching(torch.rand(30, 40), 3, 1.0, backend="numba")  # compile / load the kernels
    if not args.no_literal:
        literal_rgm(torch.rand(30, 40), 3, 3)

    fetched = {"rows": 0, "calls": 0}
    original_fetch = stream.fetch_candidates

    def counting_fetch(scores, rows, *rest):
        fetched["calls"] += 1
        fetched["rows"] += scores.shape[0] if rows is None else rows.numel()
        return original_fetch(scores, rows, *rest)

    stream.fetch_candidates = counting_fetch
    load_before = os.getloadavg()[0]
    scores = coco_like_scores()
    rows = []
    anti_hub = scores.T.contiguous()
    anti_hub[:, 0] = -5.0  # two images that no caption wants: the scan must go to the bottom of the matrix
    anti_hub[:, 1] = -4.0 + 1e-3 * torch.rand(anti_hub.shape[0], generator=torch.Generator().manual_seed(1))
    cases = (
        ("image->text", scores),
        ("text->image", scores.T.contiguous()),
        ("text->image, 2 anti-hub images", anti_hub),
    )
    for direction, matrix in cases:
        shape = "x".join(map(str, matrix.shape))
        fetched.update(rows=0, calls=0)
        fast_time, fast = timed(
            lambda m=matrix: relaxed_greedy_matching(m, args.k, args.lam, backend="numba"), args.repeats
        )
        rounds = fetched["calls"] // args.repeats
        python_time, python_out = timed(
            lambda m=matrix: relaxed_greedy_matching(m, args.k, args.lam, backend="python"), 1
        )
        gm_time, gm = timed(lambda m=matrix: greedy_matching(m, backend="numba"), args.repeats)
        assert torch.equal(fast, python_out), direction
        literal_time = gm_literal_time = float("nan")
        if not args.no_literal:
            literal_time, literal = timed(lambda m=matrix: literal_rgm(m, args.k, capacity), 1)
            gm_literal_time, gm_literal = timed(lambda m=matrix: literal_rgm(m, 1, 1, complete=False)[:, 0], 1)
            assert torch.equal(fast, literal) and torch.equal(python_out, literal), direction
            assert torch.equal(gm, gm_literal), direction
        is_time, _ = timed(lambda m=matrix: inverted_softmax(m, beta=30.0), args.repeats)
        csls_time, _ = timed(lambda m=matrix: csls(m, k=10), args.repeats)
        rows.append(
            (
                direction,
                shape,
                fast_time,
                python_time,
                literal_time,
                gm_time,
                gm_literal_time,
                is_time,
                csls_time,
                rounds,
            )
        )
    load_after = os.getloadavg()[0]

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), numba {numba.__version__}, Python {platform.python_version()}"
    )
    print(
        f"load average (1 min) before / after: {load_before:.1f} / {load_after:.1f}; "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (the literal sort dominates)"
    )
    print(
        f"RGM k = {args.k}, lam = {args.lam} (capacity {capacity}); fast times: median of {args.repeats} runs\n"
    )
    print(
        "| direction | Q x G | RGM streamed (numba) | RGM streamed (python) | RGM literal full sort | speed-up | "
        "GM streamed | GM literal | IS (beta=30) | CSLS (k=10) | fetch rounds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for direction, shape, fast_t, py_t, lit_t, gm_t, gml_t, is_t, csls_t, rounds in rows:
        print(
            f"| {direction} | {shape} | {fast_t:.2f} s | {py_t:.2f} s | {lit_t:.2f} s | {lit_t / fast_t:.1f}x | "
            f"{gm_t:.2f} s | {gml_t:.2f} s | {is_t:.2f} s | {csls_t:.2f} s | {rounds} |"
        )
    print("\nidentical output: streamed RGM numba == python" + ("" if args.no_literal else
          " == literal RGM, streamed GM == literal GM") + ", every case")


if __name__ == "__main__":
    main()
