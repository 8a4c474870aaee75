"""Plausible-Match R-Precision (PMRP; PCME §4.1.1 and App. C.1; docs/metrics.md).

A gallery item is a plausible match of a query when their binary class-label vectors differ in
at most ``zeta`` positions (Hamming distance). PMRP is the R-Precision under that relation,
reported for zeta = 0, 1, 2 and their mean. Hamming distances come from one matmul per block,
``|a| + |b| - 2 a.b``; no per-pair object is made, and the relation is never stored whole.
Unlabelled items (all-zero label vector; COCO: 48 test images) are skipped as queries and are
never positives in the gallery (they still occupy ranks). Tied scores: the expected R-Precision over
their orders (``pcmr.metrics.ties``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from pcmr.metrics.ties import expected_precision_at_r
from pcmr.ranking.blocks import block_rows, query_blocks, width_blocks
from pcmr.ranking.checks import check_scores
from pcmr.ranking.topk import ordered_topk_block
from pcmr.relevance import DIRECTIONS, I2T, T2I


def _check_labels(labels: Tensor, num: int, name: str, other: int | None = None) -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 2 or labels.shape[0] != num:
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"{name} must be a bool tensor [{num}, C] (one label vector per item), got {shape}")
    if labels.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor (binary class labels), got dtype {labels.dtype}")
    if other is not None and labels.shape[1] != other:
        raise ValueError(f"{name} has {labels.shape[1]} classes, the other side {other}; they must agree")
    return labels


def _pmrp_direction(scores: Tensor, query_labels: Tensor, gallery_labels: Tensor, zetas: Sequence[int],
                    block_size: int | None) -> dict[str, float]:
    """PMRP of the rows of ``scores [Q, G]``; labels bool ``[Q, C]``, ``[G, C]``."""
    num_queries, num_gallery = scores.shape
    device = scores.device
    dtype = torch.float64 if scores.dtype == torch.float64 else torch.float32
    query_f = query_labels.to(device=device, dtype=dtype)  # [Q, C]
    gallery_f = gallery_labels.to(device=device, dtype=dtype)  # [G, C]
    query_size = query_f.sum(1)  # [Q]
    gallery_size = gallery_f.sum(1)  # [G]
    gallery_labelled = gallery_size > 0
    rows = block_rows(num_gallery, block_size)

    def hamming(query_ids: Tensor) -> Tensor:  # [b, G], exact small integers
        return query_size[query_ids, None] + gallery_size[None, :] - 2 * query_f[query_ids] @ gallery_f.T

    # Pass 1: R per query and zeta, to group queries of similar R into blocks.
    counts = torch.zeros(len(zetas), num_queries, dtype=torch.long, device=device)
    for start, stop in query_blocks(num_queries, rows):
        query_ids = torch.arange(start, stop, device=device)
        distance = hamming(query_ids)
        for z, zeta in enumerate(zetas):
            counts[z, start:stop] = ((distance <= zeta) & gallery_labelled).sum(1)
    labelled = query_size > 0
    counts[:, ~labelled] = 0
    widest = counts.max(dim=0).values  # [Q]
    order = torch.sort(widest, stable=True).indices
    order = order[widest[order] > 0]
    precision = torch.zeros(len(zetas), num_queries, dtype=torch.float64, device=device)
    for start, stop in width_blocks(widest[order], rows):  # blocks of similar widths
        query_ids = order[start:stop]
        block = scores.index_select(0, query_ids)  # [b, G]
        width = min(int(widest[query_ids].max()) + 1, num_gallery)  # one more: a tie across the cut shows
        values, top = ordered_topk_block(block, width)  # [b, width]
        distance = hamming(query_ids)  # [b, G]
        near = distance.gather(1, top)  # [b, width]
        top_labelled = gallery_labelled[top]
        # rows whose last listed tie group continues beyond the list: the group's totals from the row
        last_group = (block == values[:, -1:]) if width < num_gallery else None  # [b, G]
        last_items = None if last_group is None else last_group.sum(1)
        for z, zeta in enumerate(zetas):
            count = counts[z, query_ids]
            last_positives = None
            if last_group is not None:
                last_positives = (last_group & (distance <= zeta) & gallery_labelled).sum(1)
            rp, _ = expected_precision_at_r(values, (near <= zeta) & top_labelled, count.clamp(min=1),
                                            last_items, last_positives)
            precision[z, query_ids] = torch.where(count > 0, rp, torch.zeros_like(rp))
    out = {}
    for z, zeta in enumerate(zetas):
        valid = counts[z] > 0
        out[f"pmrp@{zeta}"] = 100.0 * float(precision[z, valid].mean()) if bool(valid.any()) else float("nan")
    out["pmrp"] = sum(out[f"pmrp@{zeta}"] for zeta in zetas) / len(zetas)
    out["num_skipped"] = float(num_queries - int(labelled.sum()))
    return out


def pmrp(
    scores: Tensor,
    image_labels: Tensor,
    caption_labels: Tensor,
    *,
    zetas: Sequence[int] = (0, 1, 2),
    block_size: int | None = None,
    directions: Sequence[str] = DIRECTIONS,
) -> dict[str, dict[str, float]]:
    """PMRP of both directions of ``scores [N_img, N_cap]`` (PCME §4.1.1, App. C.1).

    Args:
        scores: image-caption scores, higher = more similar.
        image_labels: bool ``[N_img, C]`` class-label vectors (COCO: 80 instance classes).
        caption_labels: bool ``[N_cap, C]`` (COCO: the labels of the caption's image).
        zetas: Hamming thresholds.
        directions: the directions to compute (``("i2t",)``: the rows of ``scores`` as queries only).

    Returns ``{"i2t": {...}, "t2i": {...}}`` (the requested directions) with ``"pmrp@zeta"`` per zeta, their mean ``"pmrp"``
    (percent) and ``"num_skipped"`` (unlabelled queries).
    """
    scores = check_scores(scores)
    num_images, num_captions = scores.shape
    image_labels = _check_labels(image_labels, num_images, "image_labels")
    caption_labels = _check_labels(caption_labels, num_captions, "caption_labels", image_labels.shape[1])
    zetas = tuple(zetas)
    if not zetas or any(isinstance(z, bool) or not isinstance(z, int) or z < 0 for z in zetas):
        raise ValueError(f"zetas must be non-negative integers, got {zetas!r}")
    unknown = [d for d in directions if d not in DIRECTIONS]
    if unknown:
        raise ValueError(f"directions must be among {', '.join(map(repr, DIRECTIONS))}, got {unknown}")
    sides = {I2T: (scores, image_labels, caption_labels), T2I: (scores.T, caption_labels, image_labels)}
    return {d: _pmrp_direction(*sides[d], zetas, block_size) for d in dict.fromkeys(directions)}
