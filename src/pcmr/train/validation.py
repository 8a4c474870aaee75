"""Validation during training: encode the validation split, score it, compute rsum and R-Precision.

Model selection uses ``rsum`` (sum of R@1/5/10 in both directions, docs/metrics.md) or the mean
``r_precision`` of both directions (PCME §4.1.1). The numbers come from the one bidirectional
driver, ``pcmr.metrics.evaluate_directions``, without re-ranking or hubness.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pcmr.data.batching import ENCODE_BATCH_SIZE
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.evaluation.encode import encode_split
from pcmr.metrics import DEFAULT_KS, evaluate_directions
from pcmr.similarity import get_similarity, pairwise

__all__ = ["validate"]


def validate(
    model: nn.Module,
    split: RetrievalSplit,
    vocab: Vocabulary,
    *,
    similarity: str,
    similarity_options: dict[str, Any] | None = None,
    batch_size: int = ENCODE_BATCH_SIZE,
    seed: int = 0,
) -> dict[str, float]:
    """Retrieval metrics of ``model`` on ``split`` under one pairwise score.

    Returns ``{"i2t_R@1", ..., "t2i_R@10", "i2t_r_precision", "t2i_r_precision", "rsum",
    "r_precision"}`` in percent (``r_precision`` is the mean of both directions).
    Sampled scores (``match_prob``) draw from a generator seeded with ``seed`` so that the
    same weights always give the same numbers; the global RNG is left untouched.
    """

    options = dict(similarity_options or {})
    with torch.random.fork_rng(devices=[]):
        images, captions = encode_split(model, split, vocab, batch_size=batch_size)
        if get_similarity(similarity).sampled and "generator" not in options:
            generator = torch.Generator(device=images.device)
            generator.manual_seed(seed)
            options["generator"] = generator
        with torch.no_grad():
            scores = pairwise(similarity, images, captions, **options)  # [N_img, N_cap]
    report = evaluate_directions(scores, split.image_to_captions, ks=DEFAULT_KS, hubness_ks=()).report
    metrics: dict[str, float] = {}
    for direction in ("i2t", "t2i"):
        for key in (*(f"R@{k}" for k in DEFAULT_KS), "r_precision"):
            metrics[f"{direction}_{key}"] = float(report[direction][key])
    metrics["rsum"] = float(report["total"]["rsum"])
    metrics["r_precision"] = 0.5 * (metrics["i2t_r_precision"] + metrics["t2i_r_precision"])
    return metrics
