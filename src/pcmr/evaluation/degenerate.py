"""Whether a score matrix is degenerate: constant, or with most queries' top scores tied across a
large part of the gallery.

Identical items (the same caption written for several images) tie legitimately; a degenerate score
ties at the top across a sizeable share of the gallery (:data:`DEGENERATE_GALLERY_SHARE`).

Such a score ranks nothing: every metric of pcmr counts tied items at chance (docs/metrics.md), so the
numbers are not inflated, but they describe no model either. The evaluation report flags such rows
(a ``warning`` per row, listed under "Warnings" in ``results.md`` and printed by ``pcmr evaluate``), and
training validation does not select a model on such a score (``pcmr.train.validation``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from pcmr.evaluation import columns as schema
from pcmr.metrics import DEFAULT_KS
from pcmr.relevance import DIRECTIONS

__all__ = ["DEGENERATE_FRACTION", "DEGENERATE_GALLERY_SHARE", "collapsed_recall_warning", "degenerate_score_warning"]

#: share of queries with a wide tie at the top above which a score counts as degenerate
DEGENERATE_FRACTION = 0.5
#: a tie at the top is wide when it holds at least this share of the gallery (and two items or more)
DEGENERATE_GALLERY_SHARE = 0.1


def degenerate_score_warning(scores: Tensor, name: str = "the score") -> str | None:
    """A sentence when ``scores [N_img, N_cap]`` is constant or when, in either direction, more than
    :data:`DEGENERATE_FRACTION` of the queries have their top score shared by at least
    :data:`DEGENERATE_GALLERY_SHARE` of the gallery (two items or more); else None."""
    if scores.numel() < 2:
        return None
    first = scores.reshape(-1)[0]
    if bool((scores == first).all()):
        return (f"degenerate score: every {name} value is {float(first):.6g} (a constant score ranks nothing; "
                f"ties count at chance level)")
    for direction, matrix in (("image->text", scores), ("text->image", scores.T)):
        num_queries, num_gallery = matrix.shape
        if num_gallery < 2 or num_queries == 0:
            continue
        wide = max(2, math.ceil(DEGENERATE_GALLERY_SHARE * num_gallery))
        tied = torch.zeros(num_queries, dtype=torch.bool, device=matrix.device)
        for start in range(0, num_queries, 1024):  # [b, G] comparisons, a block at a time
            block = matrix[start:start + 1024]
            top = block.max(dim=1, keepdim=True).values
            tied[start:start + 1024] = (block == top).sum(dim=1) >= wide
        share = float(tied.double().mean())
        if share > DEGENERATE_FRACTION:
            return (f"degenerate score: for {100 * share:.0f}% of the {direction} queries at least {wide} of "
                    f"{num_gallery} items tie for the top {name} value (ties count at chance level; the ranking "
                    f"carries little information)")
    return None


def collapsed_recall_warning(rows: Sequence[Mapping[str, Any]], ks: Sequence[int] = DEFAULT_KS) -> str | None:
    """A warning when, in an evaluation table, R@K is the same for every K of ``ks`` in both directions
    for every row (a model that retrieves everything or nothing at once: collapsed scores), else None."""

    flat: list[list[float]] = []
    for row in rows:
        for direction in DIRECTIONS:
            values = [row.get(schema.recall(direction, k)) for k in ks]
            numbers = [float(v) for v in values if isinstance(v, (int, float))]
            if len(numbers) != len(values):
                return None
            flat.append(numbers)
    if not flat or any(max(v) - min(v) > 1e-9 for v in flat):
        return None
    recall = ", ".join(f"R@{k}" for k in ks)
    if all(v[0] >= 100.0 - 1e-9 for v in flat):
        return None  # every query finds its items at rank 1: a perfect model, not a collapsed one
    return (f"{recall} are equal in every row and both directions: the model's scores look collapsed "
            f"(near-constant); check the training run")
