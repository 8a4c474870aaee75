"""Validation during training: encode the validation split, score it, compute rsum and R-Precision.

Model selection (issue 8) uses ``rsum`` (sum of R@1/5/10 in both directions,
SPEC §6) or the mean ``r_precision`` of both directions (PCME §4.1.1).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.evaluation.encode import encode_split
from pcmr.metrics import retrieval_metrics
from pcmr.similarity import get_similarity, pairwise

__all__ = ["validate"]


def validate(
    model: nn.Module,
    split: RetrievalSplit,
    vocab: Vocabulary,
    *,
    similarity: str,
    similarity_options: dict[str, Any] | None = None,
    batch_size: int = 256,
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
    i2t = retrieval_metrics(scores, split.image_to_captions)
    t2i = retrieval_metrics(scores.T, split.caption_to_images)
    metrics: dict[str, float] = {}
    for direction, values in (("i2t", i2t), ("t2i", t2i)):
        for key in ("R@1", "R@5", "R@10", "r_precision"):
            metrics[f"{direction}_{key}"] = float(values[key])
    metrics["rsum"] = sum(metrics[f"{d}_R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    metrics["r_precision"] = 0.5 * (metrics["i2t_r_precision"] + metrics["t2i_r_precision"])
    return metrics
