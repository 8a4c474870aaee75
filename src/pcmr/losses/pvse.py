"""PVSE's objective (Song and Soleymani, CVPR 2019; PCME §3.1.1, App. A.2): a multiple-instance triplet loss on the
best of the K x K pairs, a diversity regulariser and an MMD domain-discrepancy term.

``loss = L_mil + lambda_div * (L_div(image residuals) + L_div(caption residuals))
+ lambda_mmd * L_mmd(image points, caption points)`` with

* ``L_mil``: the bidirectional hinge triplet loss with the hardest negative (VSE++ MAX) on
  ``S = max_cosine`` (PVSE's MIL loss): only the best-matching pair of the ``K1 x K2`` embeddings of an
  image and a caption is supervised (multiple-instance learning); averaged over the positive pairs.
* ``L_div`` (PVSE's diversity regulariser): for each item, the ``K`` local residuals ``r_k`` (the attention branch
  before the residual sum) normalised to unit length, ``|R R^T - I|_F / K^2``, averaged over the
  batch. Following the authors' release the norm is not squared and the diagonal (1 after
  normalisation) is set to 0 rather than subtracted.
* ``L_mmd`` (PVSE's domain-discrepancy term): the biased (V-statistic) MMD between the ``B_img K1`` image points and the
  ``B_cap K2`` caption points, with the release's kernel ``k(x, y) = exp(-gamma |x - y|)`` on the
  Euclidean distance (not squared) and ``gamma = 0.5``.

Both regularisers are switched off when both sides have ``K = 1``, as in the release. Weights:
``lambda_div = 0.1``, ``lambda_mmd = 0.01``, margin 0.1 (the release's COCO command). See
docs/losses.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.losses._inputs import REDUCTIONS, check_choice, check_gaussian_pair, check_positive_number
from pcmr.losses.base import RetrievalLoss
from pcmr.losses.triplet import triplet_loss
from pcmr.point_set import PointSet, as_points
from pcmr.similarity import pairwise
from pcmr.similarity._primitives import safe_sqrt

__all__ = ["PvseConfig", "PvseLoss", "diversity_loss", "mmd_loss", "mil_triplet_loss"]

_NORM_EPS = 1e-12


def diversity_loss(residuals: Tensor) -> Tensor:
    """PVSE's diversity regulariser as released: mean over items of ``|R R^T - I|_F / K^2`` with ``R`` the item's
    ``K`` residuals normalised to unit rows.

    Args:
        residuals: ``[B, K, D]``.
    Returns:
        A 0-dim tensor; exactly 0 for ``K = 1``.
    """
    if not isinstance(residuals, Tensor) or residuals.dim() != 3:
        shape = tuple(residuals.shape) if isinstance(residuals, Tensor) else type(residuals).__name__
        raise ValueError(f"residuals must be a tensor of shape [B, K, D], got {shape}")
    batch, k, _ = residuals.shape
    if k == 1 or batch == 0:
        return residuals.sum() * 0.0
    unit = F.normalize(residuals, dim=2, eps=_NORM_EPS)
    gram = unit @ unit.transpose(1, 2)  # [B, K, K]
    off_diagonal = gram.masked_fill(torch.eye(k, dtype=torch.bool, device=gram.device), 0.0)
    norms = safe_sqrt(off_diagonal.square().sum(dim=(1, 2)))  # [B] Frobenius norms
    return norms.mean() / k**2


def _kernel_mean(x: Tensor, y: Tensor, gamma: float) -> Tensor:
    # direct differences (no |x|^2 + |y|^2 - 2 x.y cancellation): identical points are at distance 0
    # exactly, where cdist's gradient is 0
    distances = torch.cdist(x, y, compute_mode="donot_use_mm_for_euclid_dist")  # [N, M]
    return torch.exp(-gamma * distances).mean()


def mmd_loss(x: Tensor, y: Tensor, gamma: float = 0.5) -> Tensor:
    """Biased squared MMD with the kernel ``exp(-gamma |x - y|)`` (PVSE's MMD term as released):
    ``mean k(x, x') - 2 mean k(x, y) + mean k(y, y')`` over all pairs, diagonals included.

    Args:
        x: ``[N, D]`` samples of one domain; y: ``[M, D]`` of the other.
        gamma: kernel rate (> 0).
    """
    for name, value in (("x", x), ("y", y)):
        if not isinstance(value, Tensor) or value.dim() != 2 or value.shape[0] == 0:
            shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"mmd_loss: {name} must be a non-empty tensor of shape [N, D], got {shape}")
    check_positive_number("mmd_gamma", gamma)
    return _kernel_mean(x, x, gamma) - 2.0 * _kernel_mean(x, y, gamma) + _kernel_mean(y, y, gamma)


def mil_triplet_loss(image_points: Tensor, caption_points: Tensor, positives: Tensor, margin: float = 0.1,
                     reduction: str = "mean") -> Tensor:
    """PVSE's MIL loss: the hardest-negative triplet loss on ``max_cosine`` scores of point sets
    ``image_points [B_img, K1, D]`` and ``caption_points [B_cap, K2, D]``."""

    scores = pairwise("max_cosine", PointSet(image_points, check=False), PointSet(caption_points, check=False))
    return triplet_loss(scores, positives, margin, "max", reduction)


@dataclass
class PvseConfig:
    """Configuration of the ``pvse`` loss.

    Attributes:
        margin: hinge margin (PVSE release: 0.1).
        lambda_div: weight of the diversity regulariser (0.1).
        lambda_mmd: weight of the MMD term (0.01).
        mmd_gamma: rate of the MMD kernel ``exp(-gamma |x - y|)`` (0.5).
        reduction: ``mean`` (release: the triplet terms averaged over anchors) | ``sum``.
    """

    margin: float = 0.1
    lambda_div: float = 0.1
    lambda_mmd: float = 0.01
    mmd_gamma: float = 0.5
    reduction: str = "mean"

    def __post_init__(self) -> None:
        check_positive_number("margin", self.margin, allow_zero=True)
        check_positive_number("lambda_div", self.lambda_div, allow_zero=True)
        check_positive_number("lambda_mmd", self.lambda_mmd, allow_zero=True)
        check_positive_number("mmd_gamma", self.mmd_gamma)
        check_choice("reduction", self.reduction, REDUCTIONS)


def _points(embedding: Gaussian, points: Tensor | None, name: str) -> Tensor:
    if points is None:
        return as_points(embedding)
    if not isinstance(points, Tensor) or points.dim() != 3 or points.shape[0] != embedding.num:
        shape = tuple(points.shape) if isinstance(points, Tensor) else type(points).__name__
        raise ValueError(f"{name} must be a tensor of shape [B, K, D] with B = {embedding.num}, got {shape}")
    return points


def _residuals(residuals: Tensor | None, points: Tensor, name: str) -> Tensor | None:
    if residuals is not None and (not isinstance(residuals, Tensor) or residuals.shape != points.shape):
        shape = tuple(residuals.shape) if isinstance(residuals, Tensor) else type(residuals).__name__
        raise ValueError(f"{name} must be a tensor of the points' shape {tuple(points.shape)}, got {shape}")
    return residuals


class PvseLoss(RetrievalLoss):
    """PVSE's objective (module docstring); evaluated with ``max_cosine``.

    Inputs (the PVSE model's outputs): ``image`` / ``caption`` embeddings, ``positives
    [B_img, B_cap]``, and optionally ``image_points [B_img, K1, D]``, ``caption_points [B_cap, K2, D]``
    (default: the PointSet's points, or each Gaussian's mean as one point) and ``image_residuals`` /
    ``caption_residuals`` of the same shapes (without them the diversity term is 0).

    Returns ``{"loss", "ranking", "diversity", "mmd"}``.
    """

    similarity_name = "max_cosine"

    def __init__(self, config: PvseConfig) -> None:
        super().__init__(config)

    def forward(self, image: Gaussian, caption: Gaussian, positives: Tensor, image_points: Tensor | None = None,
                caption_points: Tensor | None = None, image_residuals: Tensor | None = None,
                caption_residuals: Tensor | None = None, **optional: object) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        cfg = self.config
        x = _points(image, image_points, "image_points")  # [B_img, K1, D]
        y = _points(caption, caption_points, "caption_points")  # [B_cap, K2, D]
        if x.shape[2] != y.shape[2]:
            raise ValueError(f"image_points and caption_points must share D, got {x.shape[2]} and {y.shape[2]}")
        ranking = mil_triplet_loss(x, y, positives, cfg.margin, cfg.reduction)
        zero = ranking.new_zeros(())
        several = x.shape[1] > 1 or y.shape[1] > 1
        diversity = zero
        if several and cfg.lambda_div > 0:
            parts = [diversity_loss(r) for r in (_residuals(image_residuals, x, "image_residuals"),
                                                 _residuals(caption_residuals, y, "caption_residuals"))
                     if r is not None]
            diversity = sum(parts, zero)
        mmd = zero
        if several and cfg.lambda_mmd > 0:
            mmd = mmd_loss(x.reshape(-1, x.shape[2]), y.reshape(-1, y.shape[2]), cfg.mmd_gamma)
        total = ranking + cfg.lambda_div * diversity + cfg.lambda_mmd * mmd
        return {"loss": total, "ranking": ranking, "diversity": diversity, "mmd": mmd}
