"""Scores that are (squared) Euclidean distances between per-item vectors (ProbVSE eq.7-8, GCIE eq.17, PCME++ CSD).

- ``wasserstein``: ``-W2`` with ``W2^2 = |m1 - m2|^2 + |s1 - s2|^2`` over *standard
  deviations* ``s = exp(logvar / 2)`` — the exact 2-Wasserstein distance between diagonal
  Gaussians (ProbVSE eq.7-8, GCIE eq.17, CalibPE eq.7; ProbVSE eq.8 prints variances and
  PCME eq.B.6 has a typo). ``W2^2`` is the squared L2 distance between ``[m, s]`` vectors.
- ``csd``: ``-(|m1 - m2|^2 + sum_d (v1 + v2))``, the expected squared distance of two
  samples (PCME++, the closed-form sampled distance).

Both accept point embeddings (``s = v = 0``).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._closed_form import ClosedForm, Expansion, centred_means
from pcmr.similarity._primitives import dim_sum, expansion_features, safe_sqrt, safe_sqrt_
from pcmr.similarity._registry import AnnVectors, register


@register
class Wasserstein(ClosedForm):
    """``-W2(p, q)`` between diagonal Gaussians (standard deviations, not variances)."""

    name = "wasserstein"
    listing_rank = 9
    ann_vectors = AnnVectors(spread="std")
    reference = "ProbVSE eq.7, GCIE eq.17, CalibPE eq.7 (exact diagonal-Gaussian form)"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        dim = images.dim
        m1, m2 = centred_means(images, captions)
        s1, s2 = images.std, captions.std  # [N, D] | [N, 1]
        x, y = expansion_features([(m1, -2.0 * m2), (s1, -2.0 * s2)], dim)
        row = m1.square().sum(1) + dim_sum(s1.square(), dim)
        col = m2.square().sum(1) + dim_sum(s2.square(), dim)
        return [Expansion(x, y, row, col)]

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        return safe_sqrt_(parts[0]).neg_() if inplace else -safe_sqrt(parts[0])

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        dim = images.dim
        mean_sq = (images.mean - captions.mean).square().sum(1)
        std_sq = dim_sum((images.std - captions.std).square(), dim)
        return -safe_sqrt(mean_sq + std_sq)


@register
class CSD(ClosedForm):
    """``-E|z1 - z2|^2 = -(|m1 - m2|^2 + sum_d v1 + sum_d v2)``."""

    name = "csd"
    listing_rank = 12
    ann_score = "csd"
    ann_vectors = AnnVectors(spread="variance", squared=True)
    reference = "PCME++ closed-form sampled distance (successor of PCME)"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        dim = images.dim
        m1, m2 = centred_means(images, captions)
        row = m1.square().sum(1) + dim_sum(images.var, dim)
        col = m2.square().sum(1) + dim_sum(captions.var, dim)
        return [Expansion(m1, -2.0 * m2, row, col)]

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        return parts[0].neg_() if inplace else -parts[0]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        dim = images.dim
        mean_sq = (images.mean - captions.mean).square().sum(1)
        return -(mean_sq + dim_sum(images.var, dim) + dim_sum(captions.var, dim))
