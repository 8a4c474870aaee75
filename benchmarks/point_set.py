"""Speed and peak memory of ``max_cosine`` on point sets (PVSE, K points per item).

For each K (default 1, 2, 4) at ``N_img x N_cap x D`` (float32, no autograd), in its own subprocess:
- ``pcmr``: median wall time of ``pcmr.similarity.pairwise("max_cosine", images, captions)``;
- ``matmul``: the roofline measured in the same process, ``[N K, D] x [D, M K]`` in row chunks;
- ``baseline``: the straightforward way, measured in the same process: the full ``[N K, M K]``
  product (all pairs of points at once), reshaped to ``[N, K, M, K]`` and maxed;
- ``peak``: the process's peak resident memory right after the pcmr timings (inputs included).

Usage:
    .venv/bin/python benchmarks/point_set.py             # 1000 x 5000 x 512, K = 1, 2, 4
    .venv/bin/python benchmarks/point_set.py --quick     # 200 x 1000 x 128
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch

from _measure import peak_rss_bytes, timed


def worker(n: int, m: int, d: int, k: int, repeats: int) -> dict:
    from pcmr import PointSet
    from pcmr.similarity import pairwise

    gen = torch.Generator().manual_seed(0)
    images = PointSet(torch.nn.functional.normalize(torch.randn(n, k, d, generator=gen), dim=2))
    captions = PointSet(torch.nn.functional.normalize(torch.randn(m, k, d, generator=gen), dim=2))
    with torch.no_grad():
        pairwise("max_cosine", images[:8], captions[:64])  # warm-up
        pcmr_time = timed(lambda: pairwise("max_cosine", images, captions), repeats)
        peak = peak_rss_bytes()
        x, y = images.points.reshape(n * k, d), captions.points.reshape(m * k, d)
        chunk = max(1, min(n * k, 2**27 // (m * k)))
        buf = torch.empty(chunk, m * k)

        def product() -> None:
            for i in range(0, n * k, chunk):
                part = x[i:i + chunk]
                torch.mm(part, y.T, out=buf[: part.shape[0]])

        matmul_time = timed(product, repeats)
        baseline = timed(lambda: (x @ y.T).view(n, k, m, k).amax(dim=(1, 3)), repeats)
        full = (x @ y.T).view(n, k, m, k).amax(dim=(1, 3))
        same = torch.allclose(full, pairwise("max_cosine", images, captions), atol=1e-5)
    return {"K": k, "shape": [n, m, d], "pcmr_s": pcmr_time, "matmul_s": matmul_time, "baseline_s": baseline,
            "peak_bytes": peak, "same": same}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="1000,5000,512", help="N_img,N_cap,D")
    p.add_argument("--ks", default="1,2,4", help="comma-separated K values")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="200 x 1000 x 128")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    shape = (200, 1000, 128) if args.quick else tuple(int(v) for v in args.shape.split(","))
    if args.worker is not None:
        print(json.dumps(worker(*shape, args.worker, args.repeats)))
        return
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, float32")
    print("| K | shape | pcmr (s) | matmul (s) | pcmr / matmul | full product (s) | full / pcmr "
          "| peak RSS (GiB) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in (int(v) for v in args.ks.split(",")):
        cmd = [sys.executable, __file__, "--worker", str(k), "--shape", ",".join(map(str, shape)),
               "--repeats", str(args.repeats)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        assert r["same"], "pcmr and the full product disagree"
        n, m, d = r["shape"]
        print(f"| {k} | {n}x{m}x{d} | {r['pcmr_s']:.3f} | {r['matmul_s']:.3f} | "
              f"{r['pcmr_s'] / r['matmul_s']:.2f}x | {r['baseline_s']:.3f} | {r['baseline_s'] / r['pcmr_s']:.2f}x | "
              f"{r['peak_bytes'] / 2**30:.2f} |", flush=True)


if __name__ == "__main__":
    main()
