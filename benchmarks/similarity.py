"""Speed and peak memory of every pcmr.similarity score against broadcast and loop baselines.

Each (score, shape) runs in its own subprocess, which reports:
- ``pcmr``: median wall time of ``pcmr.similarity.pairwise`` (float32, ellipsoidal Gaussians);
- ``matmul``: the roofline measured in the same process: ``[N, D] x [D, M]`` for closed
  forms, ``[N*J, D] x [D, M*J]`` for sampled scores (in row chunks of <= 512 MiB of output);
- ``baseline``: the straightforward way, measured in the same process: full broadcasting
  over ``[rows, M, D]`` in row blocks of ~256 MiB per temporary for closed forms; for
  ``match_prob``/``avg_l2`` the PCME++ release's loop: for each of the J x J sample pairs a
  matrix product, a square root, two exponentials and a division (match_prob) accumulated
  into a numpy array. With ``--baseline-rows R`` the baseline runs on the first R image
  rows and is scaled by N / R (marked ``*``);
- ``peak``: the process's peak resident memory (VmHWM) right after the pcmr timings
  (inputs included, before any baseline runs).

Usage (team rule: serialise with the lock):
    flock /tmp/pcmr-bench.lock .venv/bin/python benchmarks/similarity.py            # full
    .venv/bin/python benchmarks/similarity.py --quick                              # seconds
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

import numpy as np
import torch

from _measure import peak_rss_bytes, timed

SMALL = (1000, 5000, 512)
COCO = (5000, 25000, 1024)
CLOSED_AT_COCO = ["cosine", "l2", "kl", "kl_reverse", "min_kl", "js", "wasserstein", "mahalanobis_caption",
                  "mahalanobis_image", "csd"]
BLOCK_BYTES = 256 * 2**20


def make_inputs(n: int, m: int, d: int, seed: int = 0):
    from pcmr import Gaussian

    gen = torch.Generator().manual_seed(seed)
    def one(k):
        mean = torch.nn.functional.normalize(torch.randn(k, d, generator=gen), dim=1)
        logvar = -3.0 + 0.5 * torch.randn(k, d, generator=gen)
        return Gaussian(mean, logvar)
    return one(n), one(m)


# ----------------------------------------------------------------------------- baselines
def _broadcast_formula(name: str, m1, lv1, m2, lv2):
    """The formulas of docs/similarity.md written directly on broadcast tensors ``[b, 1, D]`` x ``[1, M, D]`` -> ``[b, M]``."""
    v1, v2 = lv1.exp(), lv2.exp()
    diff2 = (m1 - m2) ** 2
    kl = lambda ma, la, va, mb, lb, vb: 0.5 * (lb - la + va / vb + (ma - mb) ** 2 / vb - 1).sum(-1)  # noqa: E731
    if name in ("cosine", "max_cosine"):  # max_cosine on Gaussians: their means as sets of one point
        return (torch.nn.functional.normalize(m1, dim=-1) * torch.nn.functional.normalize(m2, dim=-1)).sum(-1)
    if name == "l2":
        return -diff2.sum(-1).sqrt()
    if name == "kl":
        return -kl(m1, lv1, v1, m2, lv2, v2)
    if name == "kl_reverse":
        return -kl(m2, lv2, v2, m1, lv1, v1)
    if name == "min_kl":
        return -torch.minimum(kl(m1, lv1, v1, m2, lv2, v2), kl(m2, lv2, v2, m1, lv1, v1))
    if name == "js":
        return -0.5 * (kl(m1, lv1, v1, m2, lv2, v2) + kl(m2, lv2, v2, m1, lv1, v1))
    if name == "elk":
        s = v1 + v2
        return -0.5 * (diff2 / s + s.log() + math.log(2 * math.pi)).sum(-1)
    if name == "bhattacharyya":
        s = v1 + v2
        return -(0.25 * diff2 / s + 0.5 * (s.log() - math.log(2) - 0.5 * (lv1 + lv2))).sum(-1)
    if name == "wasserstein":
        return -(diff2 + ((lv1 / 2).exp() - (lv2 / 2).exp()) ** 2).sum(-1).sqrt()
    if name == "mahalanobis_caption":
        return -(diff2 / v2).sum(-1).sqrt()
    if name == "mahalanobis_image":
        return -(diff2 / v1).sum(-1).sqrt()
    if name == "csd":
        return -(diff2 + v1 + v2).sum(-1)
    raise ValueError(name)


def broadcast_baseline(name: str, images, captions) -> torch.Tensor:
    m, d = captions.num, captions.dim
    rows = max(1, BLOCK_BYTES // (m * d * 4))
    m2, lv2 = captions.mean.unsqueeze(0), captions.logvar.unsqueeze(0)
    out = []
    for i in range(0, images.num, rows):
        m1, lv1 = images.mean[i:i + rows].unsqueeze(1), images.logvar[i:i + rows].unsqueeze(1)
        out.append(_broadcast_formula(name, m1, lv1, m2, lv2))
    return torch.cat(out)


def pcmepp_baseline(name: str, zi: torch.Tensor, zc: torch.Tensor, a: float, b: float) -> np.ndarray:
    """PCME++ release style: one [N, M] matrix product per sample pair, host accumulation."""
    n, j, _ = zi.shape
    m, k, _ = zc.shape
    acc = np.zeros((n, m), dtype=np.float32)
    for jj in range(j):
        x = zi[:, jj]
        x_sq = x.square().sum(1, keepdim=True)
        for kk in range(k):
            y = zc[:, kk]
            dist = (x_sq + y.square().sum(1) - 2 * x @ y.T).sqrt()
            if name == "match_prob":
                logit = 0.5 * (-a * dist + b)  # PCME's sigmoid(2 l) = exp(l) / (exp(l) + exp(-l))
                e_pos, e_neg = logit.exp(), (-logit).exp()
                acc += (e_pos / (e_pos + e_neg)).numpy()
            else:
                acc -= dist.numpy()
    return acc / (j * k)


# ----------------------------------------------------------------------------- worker
def _matmul_time(rows: int, cols: int, d: int, repeats: int) -> float:
    """``[rows, d] x [d, cols]``, in row chunks into one reused buffer of <= 512 MiB (the full
    product at COCO shape with J = 7 would need 24 GB)."""
    x, y = torch.randn(rows, d), torch.randn(cols, d)
    chunk = max(1, min(rows, 2**27 // cols))
    buf = torch.empty(chunk, cols)
    _ = x[:64] @ y[:64].T  # warm-up

    def product() -> None:
        for i in range(0, rows, chunk):
            part = x[i:i + chunk]
            torch.mm(part, y.T, out=buf[: part.shape[0]])

    return timed(product, repeats)


def worker(name: str, n: int, m: int, d: int, j: int, repeats: int, baseline_rows: int | None) -> dict:
    from pcmr.similarity import get_similarity, pairwise

    images, captions = make_inputs(n, m, d)
    sampled = get_similarity(name).sampled
    opts = {"num_samples": j, "generator": torch.Generator().manual_seed(1)} if sampled else {}
    with torch.no_grad():
        pairwise(name, images[:8], captions[:64], **opts)  # warm-up (thread pools, allocator)
        pcmr_time = timed(lambda: pairwise(name, images, captions, **opts), repeats)
        peak = peak_rss_bytes()
        rows_j = j if sampled else 1
        matmul_time = _matmul_time(n * rows_j, m * rows_j, d, repeats)
        rows = n if baseline_rows is None else min(n, baseline_rows)
        sub = images[:rows]
        if sampled:
            zi, zc = sub.sample(j), captions.sample(j)
            base = timed(lambda: pcmepp_baseline(name, zi, zc, 30.0, 30.0), 1)
        else:
            base = timed(lambda: broadcast_baseline(name, sub, captions), 1)
        base *= n / rows
    return {"score": name, "shape": [n, m, d], "J": j if sampled else None, "pcmr_s": pcmr_time,
            "matmul_s": matmul_time, "baseline_s": base, "baseline_scaled": rows < n, "peak_bytes": peak}


def run_one(name: str, shape, j: int, repeats: int, baseline_rows: int | None) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--shape", ",".join(map(str, shape)), "--samples", str(j),
           "--repeats", str(repeats)]
    if baseline_rows is not None:
        cmd += ["--baseline-rows", str(baseline_rows)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def format_row(r: dict) -> str:
    n, m, d = r["shape"]
    shape = f"{n}x{m}x{d}" + (f", J={r['J']}" if r["J"] else "")
    star = "*" if r["baseline_scaled"] else ""
    return (f"| {r['score']} | {shape} | {r['pcmr_s']:.3f} | {r['matmul_s']:.3f} | "
            f"{r['pcmr_s'] / r['matmul_s']:.2f}x | {r['baseline_s']:.2f}{star} | "
            f"{r['baseline_s'] / r['pcmr_s']:.1f}x | {r['peak_bytes'] / 2**30:.2f} |")


def main() -> None:
    from pcmr.similarity import list_similarities

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scores", default=",".join(list_similarities()), help="comma-separated score names")
    p.add_argument("--shape", default=",".join(map(str, SMALL)), help="N_img,N_cap,D of the first table")
    p.add_argument("--coco-shape", default=",".join(map(str, COCO)), help="N_img,N_cap,D of the second table")
    p.add_argument("--coco-scores", default="closed", help="'closed' (closed forms), 'all', or 'none'")
    p.add_argument("--samples", type=int, default=7, help="J for sampled scores")
    p.add_argument("--repeats", type=int, default=3, help="timings per figure (median)")
    p.add_argument("--baseline-rows", type=int, default=None, help="baseline on the first R rows, scaled")
    p.add_argument("--coco-baseline-rows", type=int, default=100, help="same for the COCO table")
    p.add_argument("--quick", action="store_true", help="tiny shapes (200x1000x128, COCO 400x2000x256)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    if args.worker:
        print(json.dumps(worker(args.worker, *shape, args.samples, args.repeats, args.baseline_rows)))
        return
    coco = tuple(int(v) for v in args.coco_shape.split(","))
    if args.quick:
        shape, coco = (200, 1000, 128), (400, 2000, 256)
    scores = args.scores.split(",")
    coco_scores = {"closed": [s for s in CLOSED_AT_COCO if s in scores], "all": scores, "none": []}[args.coco_scores]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, float32")
    print("| score | shape | pcmr (s) | matmul (s) | pcmr / matmul | baseline (s) | baseline / pcmr | peak RSS (GiB) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in scores:
        print(format_row(run_one(name, shape, args.samples, args.repeats, args.baseline_rows)), flush=True)
    for name in coco_scores:
        print(format_row(run_one(name, coco, args.samples, 1, args.coco_baseline_rows)), flush=True)


if __name__ == "__main__":
    main()
