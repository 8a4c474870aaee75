"""Bidirectional hinge triplet losses with SUM, MAX (hardest) and semi-hard negatives.

HAL/RGM eq.2 (SUM) and eq.3 (MAX, VSE++); ProbVSE eq.3 and GCIE eq.1
(semi-hard mining after FaceNet); CalibPE eq.2.

Every positive pair ``(i, c)`` of the relation is an anchor pair (several captions
of one image, or many-to-many class-level relations, give several anchors per
row). Its negatives are

* image -> text: the captions ``c'`` of row ``i`` with ``positives[i, c'] == False``;
* text -> image: the images ``i'`` of column ``c`` with ``positives[i', c] == False``.

A true match is therefore never used as a negative, and each of the positives of
a row is contrasted with the same set of negatives (the row's non-positives).
The hinge term of a negative is ``[margin - S[i, c] + S_neg]_+``; ``negatives``
chooses how a pair's negatives are combined:

* ``"sum"``: the sum of the hinge terms of all negatives (eq.2);
* ``"max"``: the hinge term of the highest-scored negative (eq.3);
* ``"semihard"``: the hinge term of the highest-scored negative that is scored
  strictly below the positive ``S[i, c]``; when no negative is below the
  positive, the highest-scored negative (the hard one) is used instead.

An anchor with no negative in a direction (its row, or its column, is all
positive) contributes 0 in that direction. ``reduction="sum"`` adds the terms of
all anchors and both directions (the papers' form); ``"mean"`` divides that sum
by the number of positive pairs (0 when there are none).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.losses._inputs import (
    NEGATIVE_MODES,
    REDUCTIONS,
    check_choice,
    check_gaussian_pair,
    check_positive_number,
    check_scores_and_positives,
)
from pcmr.losses.base import ScoreConfig, ScoredLoss

__all__ = ["TripletConfig", "TripletLoss", "triplet_loss", "triplet_terms"]


def _combine_negatives(anchor: Tensor, negatives: Tensor, is_negative: Tensor, margin: float, mode: str) -> Tensor:
    """Hinge loss of each anchor against its negatives in one direction.

    Args:
        anchor: ``[P]`` score of each positive pair.
        negatives: ``[P, M]`` scores of the candidates (a row or a column of ``S``).
        is_negative: ``[P, M]`` bool, which candidates are negatives.
    Returns:
        ``[P]`` loss per anchor (0 for an anchor without negatives).
    """
    hinge = (margin - anchor.unsqueeze(1) + negatives).clamp_min(0.0)  # [P, M]
    if mode == "sum":
        return torch.where(is_negative, hinge, torch.zeros_like(hinge)).sum(dim=1)
    lowest = torch.finfo(negatives.dtype).min
    hardest = negatives.masked_fill(~is_negative, lowest).argmax(dim=1)  # [P]
    if mode == "semihard":
        below = is_negative & (negatives < anchor.unsqueeze(1))  # [P, M]
        semihard = negatives.masked_fill(~below, lowest).argmax(dim=1)  # [P]
        hardest = torch.where(below.any(dim=1), semihard, hardest)
    chosen = hinge.gather(1, hardest.unsqueeze(1)).squeeze(1)  # [P]
    return torch.where(is_negative.any(dim=1), chosen, torch.zeros_like(chosen))


def triplet_terms(
    scores: Tensor, positives: Tensor, margin: float = 0.2, negatives: str = "sum"
) -> tuple[Tensor, Tensor]:
    """Per-anchor triplet terms in both directions.

    Args:
        scores: ``[B_img, B_cap]`` score matrix ``S[i, c]``, higher = more similar.
        positives: ``[B_img, B_cap]`` bool relation.
        margin: hinge margin ``alpha``.
        negatives: ``"sum"``, ``"max"`` or ``"semihard"`` (see the module docstring).

    Returns:
        ``(image_to_text, text_to_image)``, each ``[P]`` for the ``P`` positive pairs
        in row-major order of ``positives.nonzero()``.
    """
    check_scores_and_positives(scores, positives)
    check_choice("negatives", negatives, NEGATIVE_MODES)
    check_positive_number("margin", margin, allow_zero=True)
    image_index, caption_index = positives.nonzero(as_tuple=True)  # [P], [P]
    anchor = scores[image_index, caption_index]  # [P]
    rows = scores[image_index]  # [P, B_cap]
    row_negative = ~positives[image_index]  # [P, B_cap]
    columns = scores[:, caption_index].t()  # [P, B_img]
    column_negative = ~positives[:, caption_index].t()  # [P, B_img]
    image_to_text = _combine_negatives(anchor, rows, row_negative, margin, negatives)
    text_to_image = _combine_negatives(anchor, columns, column_negative, margin, negatives)
    return image_to_text, text_to_image


def triplet_loss(
    scores: Tensor,
    positives: Tensor,
    margin: float = 0.2,
    negatives: str = "sum",
    reduction: str = "sum",
) -> Tensor:
    """Bidirectional hinge triplet loss on a score matrix (HAL/RGM eq.2-3).

    Args:
        scores: ``[B_img, B_cap]``, higher = more similar (any registered score).
        positives: ``[B_img, B_cap]`` bool, the in-batch relation (several per row allowed).
        margin: ``alpha`` (0.2 VSE++, 0.1 VSRN host).
        negatives: ``"sum"`` (eq.2), ``"max"`` (eq.3, hardest negative) or
            ``"semihard"`` (hardest negative below the positive, else hardest).
        reduction: ``"sum"`` over anchors and directions, or ``"mean"`` = that sum
            divided by the number of positive pairs.

    Returns:
        A 0-dim tensor.

    Example:
        >>> scores = torch.tensor([[0.9, 0.2], [0.5, 0.8]])
        >>> triplet_loss(scores, torch.eye(2, dtype=torch.bool), margin=0.2, negatives="max")
        tensor(0.)
    """
    check_choice("reduction", reduction, REDUCTIONS)
    image_to_text, text_to_image = triplet_terms(scores, positives, margin, negatives)
    total = image_to_text.sum() + text_to_image.sum()
    if reduction == "mean":
        total = total / max(int(image_to_text.numel()), 1)
    return total


@dataclass
class TripletConfig(ScoreConfig):
    """Configuration of the triplet losses ``triplet_sum`` / ``triplet_max`` / ``triplet_semihard``.

    Attributes:
        margin: hinge margin alpha (0.2 as in VSE++ / HAL / GCIE; 0.1 for a VSRN host).
        negatives: ``sum`` | ``max`` | ``semihard`` (fixed by the registry name).
        reduction: ``sum`` (papers) | ``mean`` (divide by the number of positive pairs).
    """

    margin: float = 0.2
    negatives: str = "sum"
    reduction: str = "sum"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_number("margin", self.margin, allow_zero=True)
        check_choice("negatives", self.negatives, NEGATIVE_MODES)
        check_choice("reduction", self.reduction, REDUCTIONS)


class TripletLoss(ScoredLoss):
    """Triplet loss on ``pcmr.similarity.pairwise(config.similarity, image, caption)``.

    ProbVSE trains it with ``kl`` / ``min_kl`` / ``wasserstein`` and semi-hard
    negatives; GCE / GIE with the Mahalanobis scores; VSE++ with ``cosine`` and MAX.
    Returns ``{"loss": total}``.
    """

    def __init__(self, config: TripletConfig) -> None:
        super().__init__(config)

    def forward(self, image: Gaussian, caption: Gaussian, positives: Tensor, **optional: object) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        scores = self.pairwise_scores(image, caption)  # [B_img, B_cap]
        cfg = self.config
        total = triplet_loss(scores, positives, cfg.margin, cfg.negatives, cfg.reduction)
        return {"loss": total}
