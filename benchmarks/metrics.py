"""Benchmark: the full COCO 5K-test evaluation of pcmr.metrics vs eccv-caption on one score matrix.

From one random 5000 x 25000 image-caption score matrix (seed 0, float32) this times
``pcmr.metrics.evaluate_coco`` (5K and 1K R@K / ranks / R-P / MAP@R both directions, CxC,
ECCV Caption R@K / R-P / MAP@R, hs-sum) and eccv-caption 0.1.0's ``compute_all_metrics`` on the
same rankings, including building the ranked id lists it needs (a stable argsort per query, the
same tie rule as ours), then checks that every shared value is identical.

A second input mimics a trained model (each original COCO pair's score raised by 2.5, so most
positives are near the top); pcmr's time on it is reported separately. The headline speed-up is
the same-run ratio on the random input. pcmr runs its compiled pass when numba is installed; the
torch-only path (no numba, or CUDA) is timed once too.

Run: ``flock /tmp/pcmr-bench.lock .venv/bin/python benchmarks/metrics.py``
(``--no-baseline`` skips eccv-caption, about a minute and ~3 GB of Python lists).
"""

from __future__ import annotations

import argparse
import operator
import platform
import time
import warnings

import numpy as np
import torch

from pcmr.metrics import coco_5k_test_ids, evaluate_coco, load_extra_positives
from pcmr.ranking import numba_disabled, numba_enabled


def eccv_caption_run(scores: torch.Tensor, image_ids: list[int], caption_ids: list[int]) -> tuple[dict, float, float]:
    """eccv-caption on the rankings of ``scores``: (metrics, seconds to build lists, seconds to score)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from eccv_caption import Metrics
        metrics = Metrics()
    start = time.perf_counter()
    array = scores.numpy()
    captions, images = list(caption_ids), list(image_ids)  # shared int objects
    i2t = {q: list(operator.itemgetter(*np.argsort(-row, kind="stable"))(captions))
           for q, row in zip(images, array)}
    transposed = np.ascontiguousarray(array.T)
    t2i = {q: list(operator.itemgetter(*np.argsort(-row, kind="stable"))(images))
           for q, row in zip(captions, transposed)}
    built = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = metrics.compute_all_metrics(
            i2t, t2i, target_metrics=("coco_1k_recalls", "coco_5k_recalls", "cxc_recalls", "eccv_r1",
                                      "eccv_map_at_r", "eccv_rprecision"), Ks=(1, 5, 10), verbose=False)
    done = time.perf_counter()
    return result, built - start, done - built


def shared_values(report, theirs: dict) -> list[tuple[str, float, float]]:
    """(name, ours, theirs) for every value both compute (theirs scaled to percent)."""
    pairs = []
    for direction in ("i2t", "t2i"):
        for k in (1, 5, 10):
            pairs.append((f"5K {direction} R@{k}", report[f"COCO 5K {direction}"][f"R@{k}"],
                          100 * theirs[f"coco_5k_r{k}"][direction]))
            pairs.append((f"1K {direction} R@{k}", report[f"COCO 1K {direction}"][f"R@{k}"],
                          100 * theirs[f"coco_1k_r{k}"][direction]))
            pairs.append((f"CxC {direction} R@{k}", report[f"CxC {direction}"][f"R@{k}"],
                          100 * theirs[f"cxc_r{k}"][direction]))
        pairs.append((f"ECCV {direction} R@1", report[f"ECCV {direction}"]["R@1"], 100 * theirs["eccv_r1"][direction]))
        pairs.append((f"ECCV {direction} R-P", report[f"ECCV {direction}"]["r_precision"],
                      100 * theirs["eccv_rprecision"][direction]))
        pairs.append((f"ECCV {direction} MAP@R", report[f"ECCV {direction}"]["map_at_r"],
                      100 * theirs["eccv_map_at_r"][direction]))
    return pairs


def best_time(scores: torch.Tensor, image_ids: list[int], caption_ids: list[int], repeats: int):
    """(report, best seconds over ``repeats`` calls of evaluate_coco)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        report = evaluate_coco(scores, image_ids, caption_ids)
        times.append(time.perf_counter() - start)
    return report, min(times)


def torch_path_time(scores: torch.Tensor, image_ids: list[int], caption_ids: list[int]) -> tuple[dict, float]:
    """evaluate_coco with the compiled pass switched off (what runs without numba): (report, seconds)."""
    with numba_disabled():
        return best_time(scores, image_ids, caption_ids, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-baseline", action="store_true", help="skip eccv-caption")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of pcmr (best is reported)")
    args = parser.parse_args()
    image_ids, caption_ids = coco_5k_test_ids()
    scores = torch.randn(5000, 25000, generator=torch.Generator().manual_seed(0))  # [N_img, N_cap]
    start = time.perf_counter()
    report = evaluate_coco(scores, image_ids, caption_ids)  # cold: reads eccv-caption's JSON files, compiles
    cold = time.perf_counter() - start
    report, warm = best_time(scores, image_ids, caption_ids, args.repeats)
    torch_report, torch_s = torch_path_time(scores, image_ids, caption_ids)
    row, col = load_extra_positives("coco", image_ids, caption_ids).i2t.rows(0, len(image_ids))
    trained = scores.clone()
    trained[row, col] += 2.5  # positives scored higher, as by a trained model
    trained_report, trained_s = best_time(trained, image_ids, caption_ids, args.repeats)
    print(report)
    print()
    print(trained_report)
    print()
    same = all(torch_report[row["name"]][key] == value
               or (value != value and torch_report[row["name"]][key] != torch_report[row["name"]][key])
               for row in report for key, value in row.items())
    print(f"torch-only path gives the same values as the compiled path: {same}")
    print(f"machine: {platform.machine()} {platform.processor() or ''}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, compiled pass: {numba_enabled()}")
    print()
    print("| step | seconds |")
    print("|---|---|")
    print(f"| pcmr `evaluate_coco`, random input (first call: reads eccv-caption JSON, loads/compiles kernels) "
          f"| {cold:.2f} |")
    print(f"| pcmr `evaluate_coco`, random input (best of {args.repeats}) | {warm:.2f} |")
    print(f"| pcmr `evaluate_coco`, random input, torch-only path (no numba; 1 run) | {torch_s:.2f} |")
    print(f"| pcmr `evaluate_coco`, trained-like input (best of {args.repeats}) | {trained_s:.2f} |")
    if args.no_baseline:
        return
    theirs, build_s, score_s = eccv_caption_run(scores, image_ids, caption_ids)
    print(f"| eccv-caption: build ranked lists (argsort + id lists) | {build_s:.2f} |")
    print(f"| eccv-caption: `compute_all_metrics` | {score_s:.2f} |")
    print(f"| eccv-caption total | {build_s + score_s:.2f} |")
    print(f"| speed-up (eccv-caption total / pcmr best; pcmr also computes ranks, 1K R-P, ECCV R@5/10, hs-sum) "
          f"| {(build_s + score_s) / warm:.1f}x |")
    pairs = shared_values(report, theirs)
    worst = max(abs(a - b) for _, a, b in pairs)
    print()
    print(f"{len(pairs)} shared values, max |pcmr - eccv-caption| = {worst:.3g} (percent points)")
    if worst > 1e-9:
        for name, a, b in pairs:
            if abs(a - b) > 1e-9:
                print(f"  differs: {name}: {a} vs {b}")


if __name__ == "__main__":
    main()
