"""Agreement of pcmr on one device with a float64 CPU reference: every score, the metrics, every re-ranker.

- **scores**: every registered similarity on float32 inputs on ``--device`` against the same inputs in
  float64 on the CPU (sampled scores get the same pre-drawn samples). Reported: the largest absolute
  difference relative to the largest reference value, and the queries (both directions) whose top-1
  differs where the reference separates the two candidates by more than the tolerance.
- **metrics**: :func:`pcmr.metrics.evaluate_directions` of one float64 score matrix on ``--device`` and
  on the CPU (every R@K, R-Precision, mAP@R, hubness value), largest absolute difference.
- **re-rankers**: the top-5 lists of every re-ranker on that float64 matrix, on ``--device`` and on the
  CPU; the number of queries whose lists differ.

On the CPU (``--device cpu``) it checks float32 against float64 and the metrics and re-rankers of one
process against themselves, which is how the unit tests run it; on a GPU it is the CUDA check of
``tools/gpu_check.sh``. Exits 1 when any check fails, printing one line per check.

Usage::

    python tools/device_agreement.py --device cuda [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import torch

#: a score agrees when max |device - reference| <= SCORE_TOLERANCE * max |reference|
SCORE_TOLERANCE = 1e-4
#: metrics of one float64 matrix agree to this (percent points and counts)
METRIC_TOLERANCE = 1e-9
TOP_K = 5


def _gaussians(n: int, m: int, dim: int, seed: int) -> tuple[Any, Any]:
    """Float64 CPU image and caption Gaussians: unit-norm means, log-variances around -3."""
    from pcmr import Gaussian

    gen = torch.Generator().manual_seed(seed)

    def one(count: int) -> Gaussian:
        mean = torch.nn.functional.normalize(torch.randn(count, dim, generator=gen, dtype=torch.float64), dim=1)
        logvar = -3.0 + 0.5 * torch.randn(count, dim, generator=gen, dtype=torch.float64)
        return Gaussian(mean, logvar)

    return one(n), one(m)


def _cast(g: Any, dtype: torch.dtype, device: torch.device) -> Any:
    from pcmr import Gaussian

    return Gaussian(g.mean.to(device=device, dtype=dtype), None if g.logvar is None else
                    g.logvar.to(device=device, dtype=dtype))


def _options(name: str, images: Any, captions: Any, dtype: torch.dtype, device: torch.device,
             seed: int) -> dict[str, Any]:
    """Pre-drawn samples for sampled scores (the same draws at every precision); nothing otherwise."""
    from pcmr.similarity import get_similarity

    if not getattr(get_similarity(name), "sampled", False):
        return {}
    gen = torch.Generator().manual_seed(seed + 1)
    j = 7
    image_samples = images.mean.unsqueeze(1) + images.std.unsqueeze(1) * torch.randn(
        images.num, j, images.dim, generator=gen, dtype=torch.float64)
    caption_samples = captions.mean.unsqueeze(1) + captions.std.unsqueeze(1) * torch.randn(
        captions.num, j, captions.dim, generator=gen, dtype=torch.float64)
    return {"image_samples": image_samples.to(device=device, dtype=dtype),
            "caption_samples": caption_samples.to(device=device, dtype=dtype)}


def _top1_disagreements(values: torch.Tensor, reference: torch.Tensor, tolerance: float) -> int:
    """Queries (rows) whose top-1 differs, where the reference ranks the two more than ``tolerance`` apart."""
    got, want = values.argmax(1), reference.argmax(1)
    rows = torch.arange(reference.shape[0])
    gap = reference[rows, want] - reference[rows, got]
    return int((gap > tolerance).sum())


def check_scores(device: torch.device, n: int, m: int, dim: int, seed: int) -> list[dict[str, Any]]:
    """One row per similarity: ``{"check", "name", "rel_error", "top1_differ", "ok"}``."""
    from pcmr.similarity import list_similarities, pairwise

    images, captions = _gaussians(n, m, dim, seed)
    rows = []
    for name in list_similarities():
        reference = pairwise(name, images, captions, **_options(name, images, captions, torch.float64,
                                                                torch.device("cpu"), seed))
        values = pairwise(name, _cast(images, torch.float32, device), _cast(captions, torch.float32, device),
                          **_options(name, images, captions, torch.float32, device, seed))
        values = values.detach().double().cpu()
        scale = float(reference.abs().max()) or 1.0
        rel = float((values - reference).abs().max()) / scale
        differ = sum(_top1_disagreements(v, r, SCORE_TOLERANCE * scale)
                     for v, r in ((values, reference), (values.T, reference.T)))
        finite = bool(torch.isfinite(values).all())
        rows.append({"check": "score", "name": name, "rel_error": rel, "top1_differ": differ,
                     "ok": finite and rel <= SCORE_TOLERANCE and differ == 0})
    return rows


def _reference_matrix(n: int, m: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A float64 cosine score matrix ``[n, m]`` and a relevance with 1-3 captions per image."""
    from pcmr.similarity import pairwise

    images, captions = _gaussians(n, m, dim, seed)
    scores = pairwise("cosine", images, captions)
    gen = torch.Generator().manual_seed(seed + 2)
    relevance = torch.zeros(n, m, dtype=torch.bool)
    for i in range(n):
        relevance[i, torch.randperm(m, generator=gen)[: 1 + i % 3]] = True
    return scores, relevance


def _flat(report: Any) -> dict[str, float]:
    out = {}
    for key in ("i2t", "t2i", "total"):
        for metric, value in report[key].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{key}/{metric}"] = float(value)
    return out


def check_metrics(device: torch.device, n: int, m: int, dim: int, seed: int) -> list[dict[str, Any]]:
    """One row: every metric of the evaluation table on ``device`` against the CPU (float64 scores)."""
    from pcmr.metrics import evaluate_directions

    scores, relevance = _reference_matrix(n, m, dim, seed)
    want = _flat(evaluate_directions(scores, relevance).report)
    got = _flat(evaluate_directions(scores.to(device), relevance.to(device)).report)
    error = max((abs(got[k] - want[k]) if not (math.isnan(got[k]) and math.isnan(want[k])) else 0.0)
                for k in want) if set(got) == set(want) else math.inf
    return [{"check": "metrics", "name": f"{len(want)} values", "abs_error": error, "ok": error <= METRIC_TOLERANCE}]


def check_rerankers(device: torch.device, n: int, m: int, dim: int, seed: int) -> list[dict[str, Any]]:
    """One row per re-ranker: the queries (both directions) whose top-5 list differs between devices."""
    from pcmr.inference import get_reranker, list_rerankers

    scores, _ = _reference_matrix(n, m, dim, seed)
    rows = []
    for name in list_rerankers():
        differ = 0
        for matrix in (scores, scores.T.contiguous()):
            reranker = get_reranker(name).fitted(tuple(matrix.shape))
            want = reranker.topk(matrix, TOP_K)
            got = reranker.topk(matrix.to(device), TOP_K).cpu()
            differ += int((got != want).any(1).sum())
        rows.append({"check": "rerank", "name": name, "lists_differ": differ, "ok": differ == 0})
    return rows


def run_checks(device: str | torch.device, *, n: int = 97, m: int = 411, dim: int = 48,
               seed: int = 0) -> list[dict[str, Any]]:
    """Every check on ``device`` (scores, metrics, re-rankers); sizes are deliberately not powers of two."""
    from pcmr.device import resolve_device

    dev = resolve_device(device)
    return (check_scores(dev, n, m, dim, seed) + check_metrics(dev, n, m, dim, seed)
            + check_rerankers(dev, n, m, dim, seed))


def format_row(row: dict[str, Any]) -> str:
    detail = ", ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                       if k not in ("check", "name", "ok"))
    return f"{'ok  ' if row['ok'] else 'FAIL'} {row['check']:<8} {row['name']:<20} {detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="device checked against the float64 CPU reference")
    parser.add_argument("--images", type=int, default=97)
    parser.add_argument("--captions", type=int, default=411)
    parser.add_argument("--dim", type=int, default=48)
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    rows = run_checks(args.device, n=args.images, m=args.captions, dim=args.dim)
    for row in rows:
        print(format_row(row))
    failed = [r for r in rows if not r["ok"]]
    print(f"device agreement on {args.device}: {len(rows) - len(failed)} of {len(rows)} checks agree")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "src"))
    sys.exit(main())
