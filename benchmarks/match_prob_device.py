"""``match_prob`` against the matrix product of its samples on one device, eager and fused tiles.

At each shape ``N_img x N_cap x D`` with ``J`` samples per item (pre-drawn, the same for every path):

- ``product``: ``[N_img*J, D] x [D, N_cap*J]`` on the device, in row chunks of <= 512 MiB of output
  (the floor: every sampled score needs this product);
- ``eager``: ``pcmr.similarity.pairwise("match_prob", ...)`` as shipped (``PCMR_FUSED_SCORES=0``);
- ``fused``: the same with ``PCMR_FUSED_SCORES=1`` (the tile reduction compiled by ``torch.compile``;
  compiled before timing), and the largest difference from ``eager`` relative to the largest score.

Each figure is the median of ``--repeats`` timings (CUDA synchronised); ratios are to ``product``.

Usage::

    python benchmarks/match_prob_device.py --device cuda                  # 1000x5000x512 and 5000x25000x512
    python benchmarks/match_prob_device.py --device cpu --shapes 200,1000,128 --no-fused   # seconds
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from _measure import timed

SHAPES = "1000,5000,512;5000,25000,512"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _inputs(n: int, m: int, d: int, j: int, device: torch.device) -> tuple[Any, Any, dict[str, Any]]:
    from pcmr import Gaussian

    gen = torch.Generator().manual_seed(0)

    def one(count: int) -> tuple[Gaussian, torch.Tensor]:
        mean = torch.nn.functional.normalize(torch.randn(count, d, generator=gen), dim=1)
        logvar = -3.0 + 0.5 * torch.randn(count, d, generator=gen)
        samples = mean.unsqueeze(1) + (0.5 * logvar).exp().unsqueeze(1) * torch.randn(count, j, d, generator=gen)
        return Gaussian(mean.to(device), logvar.to(device)), samples.to(device)

    (images, image_samples), (captions, caption_samples) = one(n), one(m)
    return images, captions, {"image_samples": image_samples, "caption_samples": caption_samples,
                              "a": 30.0, "b": 30.0}


def _product_time(x: torch.Tensor, y: torch.Tensor, repeats: int) -> float:
    device = x.device
    chunk = max(1, min(x.shape[0], 2**27 // y.shape[0]))
    buf = x.new_empty(chunk, y.shape[0])

    def product() -> None:
        for i in range(0, x.shape[0], chunk):
            part = x[i:i + chunk]
            torch.mm(part, y.T, out=buf[: part.shape[0]])
        _sync(device)

    product()  # warm-up
    return timed(product, repeats)


def _score_time(images: Any, captions: Any, options: dict[str, Any], fused: bool,
                repeats: int) -> tuple[float, torch.Tensor]:
    from pcmr.similarity import pairwise
    from pcmr.similarity.sampled import FUSED_SCORES_ENV

    saved = os.environ.get(FUSED_SCORES_ENV)
    os.environ[FUSED_SCORES_ENV] = "1" if fused else "0"
    try:
        device = images.mean.device
        result = pairwise("match_prob", images, captions, **options)  # warm-up (and compilation)
        _sync(device)

        def score() -> None:
            pairwise("match_prob", images, captions, **options)
            _sync(device)

        return timed(score, repeats), result
    finally:
        if saved is None:
            os.environ.pop(FUSED_SCORES_ENV, None)
        else:
            os.environ[FUSED_SCORES_ENV] = saved


def measure(device: str, n: int, m: int, d: int, j: int = 7, repeats: int = 5, fused: bool = True) -> dict[str, Any]:
    from pcmr.device import resolve_device

    dev = resolve_device(device)
    with torch.no_grad():
        images, captions, options = _inputs(n, m, d, j, dev)
        product = _product_time(options["image_samples"].reshape(n * j, d),
                                options["caption_samples"].reshape(m * j, d), repeats)
        eager, eager_scores = _score_time(images, captions, options, False, repeats)
        row: dict[str, Any] = {"device": str(dev), "shape": [n, m, d], "samples": j, "product_s": product,
                               "eager_s": eager, "eager_ratio": eager / product}
        if fused:
            fused_s, fused_scores = _score_time(images, captions, options, True, repeats)
            scale = float(eager_scores.abs().max()) or 1.0
            row.update({"fused_s": fused_s, "fused_ratio": fused_s / product,
                        "fused_rel_diff": float((fused_scores - eager_scores).abs().max()) / scale})
    return row


def format_row(r: dict[str, Any]) -> str:
    n, m, d = r["shape"]
    line = (f"match_prob on {r['device']} at {n}x{m}x{d}, J={r['samples']}: product {r['product_s'] * 1e3:.1f} ms, "
            f"eager {r['eager_s'] * 1e3:.1f} ms ({r['eager_ratio']:.2f}x)")
    if "fused_s" in r:
        line += (f", fused {r['fused_s'] * 1e3:.1f} ms ({r['fused_ratio']:.2f}x; max |fused - eager| / max |score| "
                 f"{r['fused_rel_diff']:.1e})")
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default=SHAPES, help="N_img,N_cap,D shapes separated by ';'")
    parser.add_argument("--samples", type=int, default=7, help="J")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-fused", dest="fused", action="store_false", help="skip the compiled path")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    rows = []
    for text in args.shapes.split(";"):
        n, m, d = (int(v) for v in text.split(","))
        rows.append(measure(args.device, n, m, d, args.samples, args.repeats, args.fused))
        print(format_row(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
