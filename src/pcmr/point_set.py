"""K points per item: the multi-embedding type of PVSE (Song and Soleymani, CVPR 2019).

A :class:`PointSet` holds ``points [N, K, D]``: every image or caption is represented by a set
of ``K`` deterministic embeddings instead of a distribution. It is a :class:`pcmr.Gaussian` with
no variance whose ``mean`` is the centroid of the ``K`` points (``[N, D]``), so it travels through
everything that moves Gaussians around (concatenation, row selection, devices, the evaluation's
encoders). Scores refuse it unless they are defined on sets: ``max_cosine`` (the best of the
``K1 x K2`` cosines, PVSE's matching score) is, and on a plain Gaussian it reads the mean as a
set of one point, where it equals ``cosine``. See docs/similarity.md.

Uncertainty: PVSE has none. pcmr's own proxy, :meth:`PointSet.spread`, is the mean Euclidean
distance between the ``K (K - 1) / 2`` pairs of unit-normalised points (0 for ``K = 1``): an item
whose embeddings disagree covers several meanings. See docs/models.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from pcmr.gaussian import Gaussian, NonFiniteEmbeddingError
from pcmr.suggest import unknown_name

__all__ = ["PointSet", "as_points", "uncertainty_measure_for", "UNCERTAINTY_MEASURES"]

#: uncertainty measures of a point set (pcmr's own proxy; PVSE defines none)
UNCERTAINTY_MEASURES = ("spread",)
_NORM_EPS = 1e-12


def _check_points(points: Tensor) -> None:
    if not isinstance(points, Tensor):
        raise ValueError(f"PointSet.points must be a torch.Tensor of shape [N, K, D], got {type(points).__name__}")
    if points.dim() != 3 or points.shape[1] < 1 or points.shape[2] < 1:
        raise ValueError(f"PointSet.points must have shape [N, K, D] with K, D >= 1, got {tuple(points.shape)}")
    if not points.is_floating_point():
        raise ValueError(f"PointSet.points must be a floating tensor, got dtype {points.dtype}")
    if not bool(torch.isfinite(points).all()):
        bad = int((~torch.isfinite(points)).sum())
        raise NonFiniteEmbeddingError(f"PointSet.points holds {bad} non-finite value(s) (NaN or inf) out of {points.numel()}; "
                         f"expected finite numbers")


class PointSet(Gaussian):
    """A batch of ``N`` sets of ``K`` point embeddings in ``R^D`` (PVSE).

    Args:
        points: ``[N, K, D]`` floating tensor (PVSE: unit-norm rows).
        check: validate shape and finiteness (one device sync).

    Attributes:
        points: ``[N, K, D]``.
        mean: ``[N, D]`` centroid of each item's points (read by code that needs one vector).
        logvar: always ``None`` (no variance).
    """

    points: Tensor

    def __init__(self, points: Tensor, check: bool = True) -> None:  # noqa: D107
        if check:
            _check_points(points)
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "mean", points.mean(dim=1))  # [N, D]
        object.__setattr__(self, "logvar", None)
        object.__setattr__(self, "check", False)

    # ----------------------------------------------------------------- shape
    @property
    def num_points(self) -> int:
        """``K``, the number of embeddings per item."""
        return self.points.shape[1]

    def __repr__(self) -> str:
        return (f"PointSet(N={self.num}, K={self.num_points}, D={self.dim}, dtype={self.dtype}, "
                f"device={self.device})")

    # ----------------------------------------------------------------- constructors
    @staticmethod
    def cat(gaussians: Sequence[Gaussian]) -> PointSet:
        """Concatenate point sets of one ``K`` and ``D`` along ``N``."""
        if len(gaussians) == 0:
            raise ValueError("PointSet.cat needs at least one PointSet")
        sets = [g for g in gaussians if isinstance(g, PointSet)]
        if len(sets) != len(gaussians):
            raise ValueError("PointSet.cat cannot mix point sets with Gaussians or single points")
        shapes = {tuple(g.points.shape[1:]) for g in sets}
        if len(shapes) != 1:
            raise ValueError(f"PointSet.cat needs one [K, D] for every part, got {sorted(shapes)}")
        return PointSet(torch.cat([g.points for g in sets], dim=0), check=False)

    # ----------------------------------------------------------------- uncertainty
    def spread(self) -> Tensor:
        """Mean Euclidean distance between the ``K (K - 1) / 2`` pairs of unit-normalised points of
        each item, ``[N]`` in ``[0, 2]``; 0 when ``K = 1`` (pcmr's uncertainty proxy for PVSE)."""
        k = self.num_points
        if k == 1:
            return self.points.new_zeros(self.num)
        unit = F.normalize(self.points, dim=2, eps=_NORM_EPS)  # [N, K, D]
        distances = torch.cdist(unit, unit)  # [N, K, K]
        upper = torch.triu_indices(k, k, offset=1, device=self.points.device)
        return distances[:, upper[0], upper[1]].mean(dim=1)

    def uncertainty(self, measure: str = "spread") -> Tensor:
        """One uncertainty value per item, ``[N]``; ``measure`` is ``spread`` (the only proxy of a
        point set: log-determinants and entropies need a variance)."""
        if measure not in UNCERTAINTY_MEASURES:
            raise ValueError(f"{unknown_name('uncertainty measure', measure, UNCERTAINTY_MEASURES)} (a PointSet "
                             f"has K points and no variance)")
        return self.spread()

    def log_det(self) -> Tensor:
        raise ValueError("log_det is undefined for a PointSet (K points, no variance); use uncertainty('spread')")

    def geometric_mean_std(self) -> Tensor:
        raise ValueError("geometric_mean_std is undefined for a PointSet (K points, no variance); "
                         "use uncertainty('spread')")

    # ----------------------------------------------------------------- indexing / devices
    def __getitem__(self, index: int | slice | Tensor | Sequence[int]) -> PointSet:
        """Select rows. An integer index keeps the batch dimension (``[1, K, D]``)."""
        if isinstance(index, int):
            if not -self.num <= index < self.num:
                raise IndexError(f"index {index} out of range for a PointSet of N={self.num}")
            index = slice(index, index + 1 if index != -1 else None)
        points = self.points[index]
        if points.dim() != 3:
            raise IndexError(f"index {index!r} must select rows and keep shape [n, K, D]")
        return PointSet(points, check=False)

    def to(self, *args, **kwargs) -> PointSet:
        """``Tensor.to`` applied to the points (device and/or dtype)."""
        return PointSet(self.points.to(*args, **kwargs), check=False)

    def detach(self) -> PointSet:
        """A copy cut from the autograd graph."""
        return PointSet(self.points.detach(), check=False)

    def with_mean(self, mean: Tensor) -> Gaussian:
        raise ValueError("a PointSet's mean is the centroid of its points; build a new PointSet from points instead")


def as_points(embedding: Gaussian) -> Tensor:
    """``[N, K, D]`` points of a :class:`PointSet`, or ``[N, 1, D]`` (the means) of any other Gaussian."""
    if isinstance(embedding, PointSet):
        return embedding.points
    return embedding.mean.unsqueeze(1)


def uncertainty_measure_for(embeddings: Sequence[Gaussian], requested: str) -> str | None:
    """The uncertainty measure an analysis can use on all of ``embeddings``: ``requested`` when every
    one has variances, ``spread`` (pcmr's proxy) when every one is a :class:`PointSet` with ``K > 1``,
    else None (single points carry no uncertainty)."""
    if all(not e.is_point for e in embeddings):
        return requested
    if all(isinstance(e, PointSet) and e.num_points > 1 for e in embeddings):
        return "spread"
    return None
