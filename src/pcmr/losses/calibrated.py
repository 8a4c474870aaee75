"""CalibPE: the calibrated score (point matching minus distribution matching) under a MAX triplet loss.

CalibPE eq.2, eq.5 and eq.7 (see docs/losses.md for the conventions)::

    S_cal[i, c] = S_point[i, c] - beta * W2(p_i, q_c)

* ``p_i`` / ``q_c``: the distributions of image ``i`` / caption ``c``. CalibPE §3.3 estimates them
  from augmentations: ``distributions="views"`` (default) takes the diagonal Gaussian of the ``K``
  augmented views of a side (mean and per-dimension population variance, ``1/K`` normalisation so
  ``K = 1`` is allowed); a side without views uses the model's Gaussian (head) instead.
  ``distributions="heads"`` always takes the model's Gaussian heads (a variant, not the paper: it
  lets a Gaussian model learn its variance heads through the W2 term).
* ``S_point``: ``"mean_cosine"`` (default), the mean cosine over all pairs of points of the two
  sides (views, or the head mean when a side has no views: eq.5's ``E E u^T v``), or
  ``"cosine_of_means"``, the cosine of the two distributions' means.
* ``W2``: the closed-form 2-Wasserstein distance of diagonal Gaussians (CalibPE eq.7).

Two departures from the printed equations, both documented in docs/losses.md:

* no log is taken, neither of the cosine (eq.5's ``E log(u^T v)`` is undefined for negative
  cosines) nor of the hinge (eq.3's ``E log L_t``, which is ``-inf`` whenever a hinge is zero);
* one calibrated score serves positives and negatives: the paper writes the negative pairs'
  measure as ``point + KL`` (to be minimised); read literally, that would pull the distributions
  of negative pairs together. Here the MAX triplet loss of eq.2 lowers the negatives'
  ``S_cal = point - beta * W2``, i.e. it lowers their point score and *raises* their W2.

At evaluation CalibPE ranks by the cosine of the embeddings (``similarity_name = "cosine"``).
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
)
from pcmr.losses.base import RetrievalLoss
from pcmr.losses.triplet import triplet_loss
from pcmr.similarity import pairwise

__all__ = [
    "CalibratedConfig",
    "CalibratedTripletLoss",
    "calibrated_scores",
    "calibrated_triplet_loss",
    "gaussian_from_views",
]

POINT_TERMS = ("mean_cosine", "cosine_of_means")
DISTRIBUTIONS = ("views", "heads")
VIEW_VARIANCE_FLOOR = 1e-12  # keeps log(var) finite when all views coincide


def _check_views(name: str, views: Tensor, gaussian: Gaussian) -> None:
    if (
        not isinstance(views, Tensor)
        or views.dim() != 3
        or views.shape[0] != gaussian.num
        or views.shape[2] != gaussian.dim
        or views.shape[1] < 1
        or not views.is_floating_point()
    ):
        shape = tuple(views.shape) if isinstance(views, Tensor) else type(views).__name__
        raise ValueError(
            f"{name} must be a floating tensor of shape [{gaussian.num}, K, {gaussian.dim}] (K >= 1 views), got {shape}"
        )
    if views.dtype != gaussian.dtype or views.device != gaussian.device:
        raise ValueError(
            f"{name} must match the embeddings' dtype and device ({gaussian.dtype}, {gaussian.device}), "
            f"got ({views.dtype}, {views.device})"
        )


def gaussian_from_views(views: Tensor) -> Gaussian:
    """The diagonal Gaussian of ``K`` views ``[N, K, D]``: mean and population variance
    over ``K`` (floored at 1e-12 before the log). Differentiable."""
    mean = views.mean(dim=1)  # [N, D]
    var = (views - mean.unsqueeze(1)).pow(2).mean(dim=1)  # [N, D]
    return Gaussian(mean, var.clamp_min(VIEW_VARIANCE_FLOOR).log(), check=False)


def _point_sets(gaussian: Gaussian, views: Tensor | None) -> Tensor:
    return views if views is not None else gaussian.mean.unsqueeze(1)  # [N, K, D]


def calibrated_scores(
    image: Gaussian,
    caption: Gaussian,
    *,
    image_views: Tensor | None = None,
    caption_views: Tensor | None = None,
    beta: float = 1.0,
    point_term: str = "mean_cosine",
    distributions: str = "views",
) -> Tensor:
    """CalibPE's calibrated score ``S_point - beta * W2`` (see the module docstring).

    Args:
        image / caption: Gaussian heads (means and log-variances; points allowed).
        image_views: ``[B_img, K, D]`` embeddings of ``K`` augmented views, or None.
        caption_views: ``[B_cap, K', D]``, or None.
        beta: weight of the distribution-matching term (``>= 0``).
        point_term: ``"mean_cosine"`` or ``"cosine_of_means"``.
        distributions: ``"views"`` (the Gaussian of a side's views, its head without views) or
            ``"heads"`` (always the model's Gaussians).

    Returns:
        ``[B_img, B_cap]``, higher = more similar.
    """

    check_positive_number("beta", beta, allow_zero=True)
    check_choice("point_term", point_term, POINT_TERMS)
    check_choice("distributions", distributions, DISTRIBUTIONS)
    if image_views is not None:
        _check_views("image_views", image_views, image)
    if caption_views is not None:
        _check_views("caption_views", caption_views, caption)
    from_views = distributions == "views"
    image_dist = gaussian_from_views(image_views) if from_views and image_views is not None else image
    caption_dist = gaussian_from_views(caption_views) if from_views and caption_views is not None else caption
    if point_term == "cosine_of_means":
        point = pairwise("cosine", Gaussian.point(image_dist.mean), Gaussian.point(caption_dist.mean))
    else:
        image_points = _point_sets(image, image_views)  # [B_img, K, D]
        caption_points = _point_sets(caption, caption_views)  # [B_cap, K', D]
        (n, k, d), (m, k2, _) = image_points.shape, caption_points.shape
        cosines = pairwise(
            "cosine", Gaussian.point(image_points.reshape(n * k, d)), Gaussian.point(caption_points.reshape(m * k2, d))
        )  # [B_img*K, B_cap*K']
        point = cosines.view(n, k, m, k2).mean(dim=(1, 3))  # [B_img, B_cap]
    if beta == 0:
        return point
    negative_w2 = pairwise("wasserstein", image_dist, caption_dist)  # [B_img, B_cap], = -W2
    return point + beta * negative_w2


def calibrated_triplet_loss(
    image: Gaussian,
    caption: Gaussian,
    positives: Tensor,
    *,
    image_views: Tensor | None = None,
    caption_views: Tensor | None = None,
    beta: float = 1.0,
    point_term: str = "mean_cosine",
    distributions: str = "views",
    margin: float = 0.2,
    negatives: str = "max",
    reduction: str = "sum",
) -> Tensor:
    """CalibPE loss: the triplet loss (MAX by default, CalibPE eq.2) on :func:`calibrated_scores`.

    Returns:
        A 0-dim tensor.
    """
    check_gaussian_pair(image, caption, positives)
    scores = calibrated_scores(
        image, caption, image_views=image_views, caption_views=caption_views, beta=beta, point_term=point_term,
        distributions=distributions,
    )  # [B_img, B_cap]
    return triplet_loss(scores, positives, margin, negatives, reduction)


@dataclass
class CalibratedConfig:
    """Configuration of ``calibpe``.

    Attributes:
        margin: hinge margin (0.2).
        beta: weight of the W2 distribution-matching term (1.0: eq.5 weighs point and
            distribution matching equally).
        point_term: ``mean_cosine`` | ``cosine_of_means``.
        distributions: ``views`` (CalibPE §3.3: estimated from the augmented views) | ``heads``
            (the model's Gaussian heads, so they are trained by the W2 term).
        negatives: ``max`` (CalibPE eq.2) | ``sum`` | ``semihard``.
        reduction: ``sum`` | ``mean``.
    """

    margin: float = 0.2
    beta: float = 1.0
    point_term: str = "mean_cosine"
    distributions: str = "views"
    negatives: str = "max"
    reduction: str = "sum"

    def __post_init__(self) -> None:
        check_positive_number("margin", self.margin, allow_zero=True)
        check_positive_number("beta", self.beta, allow_zero=True)
        check_choice("point_term", self.point_term, POINT_TERMS)
        check_choice("distributions", self.distributions, DISTRIBUTIONS)
        check_choice("negatives", self.negatives, NEGATIVE_MODES)
        check_choice("reduction", self.reduction, REDUCTIONS)


class CalibratedTripletLoss(RetrievalLoss):
    """CalibPE's objective. Optional inputs: ``image_views [B_img, K, D]`` and
    ``caption_views [B_cap, K', D]`` (model outputs when the batch carries views).
    Returns ``loss`` and, for logging, the mean calibrated score of the positive pairs
    (``positive_score``).

    With ``distributions="views"`` a side that has views ignores its Gaussian head, so a model
    whose heads predict log-variances would leave them untrained (and any score evaluated from them
    meaningless): that combination raises ``ValueError``; use a point model (CalibPE) or
    ``distributions="heads"``."""

    similarity_name = "cosine"

    def __init__(self, config: CalibratedConfig) -> None:
        super().__init__(config)

    def forward(
        self,
        image: Gaussian,
        caption: Gaussian,
        positives: Tensor,
        *,
        image_views: Tensor | None = None,
        caption_views: Tensor | None = None,
        **optional: object,
    ) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        cfg = self.config
        if cfg.distributions == "views":
            for side, gaussian, views in (("image", image, image_views), ("caption", caption, caption_views)):
                if views is not None and not gaussian.is_point:
                    raise ValueError(
                        f"calibpe takes the {side} distributions from the augmented views "
                        f"(loss.distributions=views), so the model's {side} variance head would get no "
                        f"gradient; use a point model (CalibPE: model.name=vsepp) or loss.distributions=heads"
                    )
        scores = calibrated_scores(
            image, caption, image_views=image_views, caption_views=caption_views,
            beta=cfg.beta, point_term=cfg.point_term, distributions=cfg.distributions,
        )  # [B_img, B_cap]
        total = triplet_loss(scores, positives, cfg.margin, cfg.negatives, cfg.reduction)
        positive_scores = scores.detach()[positives]
        positive_score = positive_scores.mean() if positive_scores.numel() else torch.zeros_like(total)
        return {"loss": total, "positive_score": positive_score}
