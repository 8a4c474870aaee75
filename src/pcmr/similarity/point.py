"""Scores of the means only: ``cosine`` and ``l2`` (PCME Table 1 "mean only").

Both accept point embeddings and ignore any variance.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._closed_form import ClosedForm, Expansion, centred_means
from pcmr.similarity._primitives import safe_sqrt, safe_sqrt_
from pcmr.similarity._registry import AnnVectors, register

_NORM_EPS = 1e-12


@register
class Cosine(ClosedForm):
    """``S = <m1/|m1|, m2/|m2|>`` (a zero mean has cosine 0 with everything)."""

    name = "cosine"
    listing_rank = 1
    means_only = True
    batched_candidates = True
    ann_score = "cosine"
    ann_vectors = AnnVectors(normalised=True)
    reference = "cosine of the means (PCME Table 1 'mean only'; VSE++)"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        x = F.normalize(images.mean, dim=1, eps=_NORM_EPS)  # [N_img, D]
        y = F.normalize(captions.mean, dim=1, eps=_NORM_EPS)  # [N_cap, D]
        return [Expansion(x, y, None, None)]

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        return parts[0]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        x = F.normalize(images.mean, dim=1, eps=_NORM_EPS)
        y = F.normalize(captions.mean, dim=1, eps=_NORM_EPS)
        return (x * y).sum(1)

    def candidate_scores(self, candidate_means: Tensor, query_means: Tensor, options: dict[str, Any]) -> Tensor | None:
        """The cosine of each query with its candidates, without repeating each query ``C`` times."""
        x = F.normalize(candidate_means, dim=2, eps=_NORM_EPS)  # [Q, C, D]
        y = F.normalize(query_means.to(x.dtype), dim=1, eps=_NORM_EPS)  # [Q, D]
        return torch.bmm(x, y.unsqueeze(2)).squeeze(2)


@register
class L2(ClosedForm):
    """``S = -|m1 - m2|`` with a safe square root."""

    name = "l2"
    listing_rank = 2
    means_only = True
    ann_score = "l2"
    ann_vectors = AnnVectors()
    reference = "negative Euclidean distance of the means"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        m1, m2 = centred_means(images, captions)
        return [Expansion(m1, -2.0 * m2, m1.square().sum(1), m2.square().sum(1))]

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        if inplace:
            return safe_sqrt_(parts[0]).neg_()
        return -safe_sqrt(parts[0])

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        return -safe_sqrt((images.mean - captions.mean).square().sum(1))


