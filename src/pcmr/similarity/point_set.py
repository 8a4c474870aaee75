"""Scores of point sets: ``max_cosine``, the best of the ``K1 x K2`` cosines (PVSE).

PVSE (Song and Soleymani, CVPR 2019; PCME §3.1.1) embeds each item as ``K`` points and scores an
image-caption pair by its best-matching pair of embeddings::

    S(i, c) = max_{k <= K1, l <= K2} <v_k / |v_k|, t_l / |t_l|>

Inputs are :class:`pcmr.PointSet` (``points [N, K, D]``) or any Gaussian, whose mean is read as a
set of one point (then the score is ``cosine``); variances are ignored. The two sides may hold
different ``K``. Blocks are one matrix product ``[n K1, D] x [D, K2 N_cap]`` (caption points laid out
point-major, so the product reads as ``[n, K1 K2, N_cap]``) followed by a max over the middle axis;
a block's temporaries are ``n K1 K2 N_cap`` numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.point_set import as_points
from pcmr.similarity._registry import Similarity, register

_NORM_EPS = 1e-12


@dataclass(frozen=True)
class _SetState:
    images: Tensor  # [N_img, K1, D] unit rows
    captions_t: Tensor  # [D, K2 * N_cap] unit columns, point-major: column l * N_cap + c is point l of caption c
    num_captions: int
    caption_points: int


def _unit_points(embedding: Gaussian) -> Tensor:
    return F.normalize(as_points(embedding), dim=2, eps=_NORM_EPS)  # [N, K, D]


@register
class MaxCosine(Similarity):
    """``S = max_{k, l} cos(v_k, t_l)`` over the ``K1 x K2`` pairs of points (PVSE's MIL matching)."""

    name = "max_cosine"
    listing_rank = 15
    ann_score = "cosine"  # candidates by the cosine of the point sets' centroids
    accepts_point_sets = True
    reference = "PVSE (Song and Soleymani, CVPR 2019; PCME §3.1.1): best pair of the K x K cosines (MIL)"

    def row_bytes(self, images: Gaussian, captions: Gaussian, options: dict[str, Any], grad: bool) -> int:
        pairs = as_points(images).shape[1] * as_points(captions).shape[1]
        # the [K1, N_cap, K2] products of one row (twice with autograd: products and max indices)
        return (2 if grad else 1) * pairs * captions.num * images.mean.element_size()

    def prepare(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> _SetState:
        y = _unit_points(captions)  # [N_cap, K2, D]
        columns = y.transpose(0, 1).reshape(-1, y.shape[2]).T  # [D, K2 * N_cap]
        return _SetState(_unit_points(images), columns, y.shape[0], y.shape[1])

    def block(self, state: _SetState, rows: slice, out: Tensor | None) -> Tensor:
        x = state.images[rows]  # [n, K1, D]
        n, k1, dim = x.shape
        if k1 * state.caption_points == 1:  # one point per item: the cosine matrix itself
            if out is None:
                return x[:, 0] @ state.captions_t
            return torch.mm(x[:, 0], state.captions_t, out=out)
        # row i * K1 + k, column l * N_cap + c  ->  [n, K1 * K2, N_cap]: a max over the middle axis
        products = (x.reshape(n * k1, dim) @ state.captions_t).view(n, k1 * state.caption_points,
                                                                    state.num_captions)
        if out is None:
            return products.amax(dim=1)  # [n, N_cap]
        return torch.amax(products, dim=1, out=out)

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        products = torch.einsum("nkd,nld->nkl", _unit_points(images), _unit_points(captions))  # [N, K1, K2]
        return products.flatten(1).amax(dim=1)
