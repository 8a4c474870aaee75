"""Hubness-aware losses: HAL and MAX+HAL (HAL/RGM eq.4) and the authors' released form.

HAL/RGM eq.4 (``docs/losses.md``). HAL re-weights every score by local hub statistics inside the
mini-batch before a SUM (``hal``) or MAX (``max_hal``) triplet loss::

    S'[i, c] = S[i, c] * exp( mean_{c~ in K1} S[i, c~] + mean_{i~ in K2} S[i~, c] )
    K1 = kNN_k(i, captions \\ {c}),   K2 = kNN_k(c, images \\ {i})

Neighbours are the ``k`` highest-scored items (for L2-normalised embeddings this
is the paper's L2 nearest-neighbour set). Following eq.4 literally, a
pair's neighbourhoods exclude only the pair's own partner (``c`` from row ``i``,
``i`` from column ``c``): other captions relevant to ``i`` may be neighbours.
``exclude_positives=True`` additionally leaves every positive of the row / column
out. When fewer than ``k`` candidates remain, all of them are used; an empty
neighbourhood contributes 0 to the exponent. Gradients flow through the weights.

The released variant (``hal_released``; the authors' code differs from eq.4) is a log-sum-exp loss::

    L = mean_i log(1 + sum_{c neg} exp(alpha (S[i,c] - eps))) / alpha
      + mean_c log(1 + sum_{i neg} exp(alpha (S[i,c] - eps))) / alpha
      - mean_{(i,c) pos} log(1 + relu(S[i,c]))

The authors write it for a diagonal relation with ``S'`` = ``S`` with its
diagonal zeroed; a zeroed entry would still add the constant
``exp(-alpha * eps)`` inside each log. Here every positive is left out of the
sums instead, which handles several positives per row and differs from the
zeroed-diagonal form only by that constant (about 1.2e-4 at alpha=30, eps=0.3).
With ``positives = eye(B)`` the three means are the released ``mean_i``.
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
from pcmr.losses.triplet import triplet_loss

__all__ = [
    "HalConfig",
    "HalLoss",
    "HalReleasedConfig",
    "HalReleasedLoss",
    "hal_loss",
    "hal_released_loss",
    "hal_weights",
]


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (HAL neighbourhood size) must be an int >= 1, got {k!r}")


def _neighbourhood_mean(scores: Tensor, excluded: Tensor, k: int) -> Tensor:
    """For every entry ``(r, c)``: the mean of the ``k`` highest scores of row ``r``
    among the columns that are neither ``c`` nor ``excluded[r]``.

    Args:
        scores: ``[R, C]``; excluded: ``[R, C]`` bool.
    Returns:
        ``[R, C]`` (0 where the neighbourhood is empty).
    """
    num_rows, num_cols = scores.shape
    masked = scores.masked_fill(excluded, float("-inf"))
    sorted_scores, order = masked.sort(dim=1, descending=True)  # [R, C]
    valid_sorted = ~excluded.gather(1, order)  # [R, C], valid entries first
    sorted_scores = torch.where(valid_sorted, sorted_scores, torch.zeros_like(sorted_scores))
    prefix = torch.cat([scores.new_zeros(num_rows, 1), sorted_scores.cumsum(dim=1)], dim=1)  # [R, C + 1]
    rank = torch.empty_like(order).scatter_(
        1, order, torch.arange(num_cols, device=scores.device).expand(num_rows, -1)
    )  # [R, C], position of column c in row r's order
    num_valid = (~excluded).sum(dim=1, keepdim=True)  # [R, 1]
    self_valid = ~excluded  # is c itself among the candidates it must be removed from?
    k_eff = torch.clamp(torch.minimum(num_valid - self_valid.long(), torch.full_like(num_valid, k)), min=0)
    inside = self_valid & (rank < k_eff)  # c is among the top-k_eff: take one more and remove c
    take = torch.where(inside, k_eff + 1, k_eff)  # [R, C]
    total = prefix.gather(1, take) - torch.where(inside, scores, torch.zeros_like(scores))
    return torch.where(k_eff > 0, total / k_eff.clamp(min=1).to(scores.dtype), torch.zeros_like(total))


def hal_weights(scores: Tensor, positives: Tensor, k: int = 3, exclude_positives: bool = False) -> Tensor:
    """HAL re-weighting factors (HAL/RGM eq.4).

    ``W[i, c] = exp( mean_{c~ in kNN_k(i, captions \\ {c})} S[i, c~]
    + mean_{i~ in kNN_k(c, images \\ {i})} S[i~, c] )``, so that ``S' = S * W``.

    Args:
        scores: ``[B_img, B_cap]`` score matrix (HAL uses cosine; the exponent assumes
            bounded scores).
        positives: ``[B_img, B_cap]`` bool relation; only used when
            ``exclude_positives`` is True (then a pair's neighbourhoods also leave out
            every positive of its row / column).
        k: neighbourhood size (paper default 3; 1 for clean data).

    Returns:
        ``[B_img, B_cap]`` positive weights, differentiable with respect to ``scores``.
    """
    check_scores_and_positives(scores, positives)
    _check_k(k)
    if exclude_positives:
        excluded = positives
    else:
        excluded = torch.zeros_like(positives)
    row_mean = _neighbourhood_mean(scores, excluded, k)  # [B_img, B_cap], captions near image i
    column_mean = _neighbourhood_mean(scores.t(), excluded.t(), k).t()  # [B_img, B_cap], images near c
    return torch.exp(row_mean + column_mean)


def hal_loss(
    scores: Tensor,
    positives: Tensor,
    margin: float = 0.2,
    k: int = 3,
    negatives: str = "sum",
    reduction: str = "sum",
    exclude_positives: bool = False,
) -> Tensor:
    """HAL (eq.4 + SUM, ``negatives="sum"``) or MAX+HAL (eq.4 + MAX, ``negatives="max"``):
    :func:`pcmr.losses.triplet_loss` on ``S * hal_weights(S)``. Returns a 0-dim tensor."""
    weighted = scores * hal_weights(scores, positives, k, exclude_positives)  # [B_img, B_cap]
    return triplet_loss(weighted, positives, margin, negatives, reduction)


def hal_released_loss(scores: Tensor, positives: Tensor, alpha: float = 30.0, eps: float = 0.3) -> Tensor:
    """The HAL authors' released log-sum-exp loss, finite at any ``alpha``.

    Args:
        scores: ``[B_img, B_cap]``; positives: ``[B_img, B_cap]`` bool.
        alpha: temperature (30; Flickr30k 60). eps: threshold (0.3; Flickr30k 0.7).

    Returns:
        A 0-dim tensor (see the module docstring for the formula).
    """
    check_scores_and_positives(scores, positives)
    check_positive_number("alpha", alpha)
    check_positive_number("eps", eps, allow_zero=True)
    logits = (alpha * (scores - eps)).masked_fill(positives, float("-inf"))  # [B_img, B_cap]
    row_pad = logits.new_zeros(logits.shape[0], 1)  # the "1 +" inside the log
    image_terms = torch.logsumexp(torch.cat([row_pad, logits], dim=1), dim=1) / alpha  # [B_img]
    column_pad = logits.new_zeros(1, logits.shape[1])
    caption_terms = torch.logsumexp(torch.cat([column_pad, logits], dim=0), dim=0) / alpha  # [B_cap]
    positive_scores = scores[positives]  # [P]
    total = image_terms.mean() + caption_terms.mean()
    if positive_scores.numel() > 0:
        total = total - torch.log1p(torch.relu(positive_scores)).mean()
    return total


@dataclass
class HalConfig(ScoreConfig):
    """Configuration of ``hal`` (SUM) and ``max_hal`` (MAX).

    Attributes:
        margin: hinge margin alpha (0.2 in the paper).
        k: neighbourhood size of eq.4 (3 by default; the paper uses 1 for clean data).
        negatives: ``sum`` (hal) | ``max`` (max_hal) | ``semihard``; fixed by the registry name.
        reduction: ``sum`` | ``mean`` (see :func:`pcmr.losses.triplet_loss`).
        exclude_positives: also leave the pair's other positives out of its neighbourhoods
            (False follows eq.4 literally).
    """

    margin: float = 0.2
    k: int = 3
    negatives: str = "sum"
    reduction: str = "sum"
    exclude_positives: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_number("margin", self.margin, allow_zero=True)
        _check_k(self.k)
        check_choice("negatives", self.negatives, NEGATIVE_MODES)
        check_choice("reduction", self.reduction, REDUCTIONS)
        if not isinstance(self.exclude_positives, bool):
            raise ValueError(f"exclude_positives must be a bool, got {self.exclude_positives!r}")


class HalLoss(ScoredLoss):
    """HAL / MAX+HAL on ``pcmr.similarity.pairwise(config.similarity, ...)``. Returns ``{"loss"}``."""

    def __init__(self, config: HalConfig) -> None:
        super().__init__(config)

    def forward(self, image: Gaussian, caption: Gaussian, positives: Tensor, **optional: object) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        cfg = self.config
        scores = self.pairwise_scores(image, caption)  # [B_img, B_cap]
        total = hal_loss(scores, positives, cfg.margin, cfg.k, cfg.negatives, cfg.reduction, cfg.exclude_positives)
        return {"loss": total}


@dataclass
class HalReleasedConfig(ScoreConfig):
    """Configuration of ``hal_released`` (the authors' released code).

    Attributes:
        alpha: temperature of the log-sum-exp (30; the authors use 60 on Flickr30k).
        eps: score threshold (0.3; 0.7 on Flickr30k).
    """

    alpha: float = 30.0
    eps: float = 0.3

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_number("alpha", self.alpha)
        check_positive_number("eps", self.eps, allow_zero=True)


class HalReleasedLoss(ScoredLoss):
    """The released HAL form on ``pcmr.similarity.pairwise(config.similarity, ...)``. Returns ``{"loss"}``."""

    def __init__(self, config: HalReleasedConfig) -> None:
        super().__init__(config)

    def forward(self, image: Gaussian, caption: Gaussian, positives: Tensor, **optional: object) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        scores = self.pairwise_scores(image, caption)  # [B_img, B_cap]
        return {"loss": hal_released_loss(scores, positives, self.config.alpha, self.config.eps)}
