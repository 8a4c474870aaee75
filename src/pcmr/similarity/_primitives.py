"""Numerical building blocks shared by the pairwise scores (``docs/similarity.md``).

``safe_sqrt`` gives finite values *and* gradients for identical inputs (the
PCME++ release takes ``sqrt`` of a squared distance without a floor and returns
NaN for identical vectors). ``sampled_pair_distances`` computes all ``J x J``
sample distances of every image/caption pair with one matrix product.
``expansion_features`` turns ``sum_d a_d b_d`` between an ``[N, D]``-or-``[N, 1]``
image quantity and a caption quantity into columns of one matrix product,
without expanding spherical (``[N, 1]``) quantities to ``D``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["safe_sqrt", "sampled_pair_distances", "squared_distances", "expansion_features", "dim_sum", "rowwise_dot"]

DEFAULT_SQRT_EPS = 1e-12


def safe_sqrt(x: Tensor, eps: float = DEFAULT_SQRT_EPS) -> Tensor:
    """``sqrt(max(x, eps))``: finite value and gradient everywhere, including ``x = 0``.

    Below ``eps`` the value is ``sqrt(eps)`` (``1e-6`` by default) and the gradient is 0.
    For a squared distance ``x = |u|^2`` the chain rule gives ``u / |u|`` above the floor,
    which is bounded, so gradients stay finite however close the two points are.

    Args:
        x: any tensor of (squared) non-negative quantities; small negative values from
            rounding are floored too.
        eps: the floor, ``> 0``.
    """
    if not eps > 0:
        raise ValueError(f"safe_sqrt: eps must be > 0, got {eps}")
    return x.clamp_min(eps).sqrt()


def safe_sqrt_(x: Tensor, eps: float = DEFAULT_SQRT_EPS) -> Tensor:
    """In-place :func:`safe_sqrt` for tensors outside autograd."""
    return x.clamp_min_(eps).sqrt_()


def squared_distances(x: Tensor, y: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``|x_i - y_j|^2`` for ``x [N, D]``, ``y [M, D]`` -> ``[N, M]`` via one ``addmm``,
    floored at 0. With ``out`` (no autograd) it is written in place."""
    x_sq = x.square().sum(1, keepdim=True)  # [N, 1]
    y_sq = y.square().sum(1).unsqueeze(0)  # [1, M]
    if out is None:
        return torch.addmm(y_sq, x, y.T, alpha=-2.0).add(x_sq).clamp_min(0.0)
    torch.addmm(y_sq, x, y.T, alpha=-2.0, out=out)
    return out.add_(x_sq).clamp_min_(0.0)


def sampled_pair_distances(
    image_samples: Tensor, caption_samples: Tensor, *, eps: float = DEFAULT_SQRT_EPS
) -> Tensor:
    """Euclidean distances between every image sample and every caption sample
    (PCME eq.2-3, the inner term of ``match_prob``/``avg_l2``).

    One matrix product ``[N*J, D] x [D, M*K]`` gives all squared distances, then a
    :func:`safe_sqrt` (finite value and gradient for identical samples).

    Args:
        image_samples: ``[N, J, D]``.
        caption_samples: ``[M, K, D]`` (usually ``K = J``).
        eps: floor of :func:`safe_sqrt`.

    Returns:
        ``[N, M, J, K]`` distances (a permuted view of an ``[N*J, M*K]`` matrix);
        differentiable.
    """
    if image_samples.dim() != 3 or caption_samples.dim() != 3:
        raise ValueError(
            "sampled_pair_distances expects image_samples [N, J, D] and caption_samples [M, K, D], got "
            f"{tuple(image_samples.shape)} and {tuple(caption_samples.shape)}"
        )
    if image_samples.shape[2] != caption_samples.shape[2]:
        raise ValueError(
            f"sampled_pair_distances: dimension D differs: image_samples {tuple(image_samples.shape)} vs "
            f"caption_samples {tuple(caption_samples.shape)}"
        )
    n, j, d = image_samples.shape
    m, k, _ = caption_samples.shape
    sq = squared_distances(image_samples.reshape(n * j, d), caption_samples.reshape(m * k, d))  # [N*J, M*K]
    return safe_sqrt(sq, eps).view(n, j, m, k).permute(0, 2, 1, 3)  # [N, M, J, K]


def dim_sum(t: Tensor, dim: int) -> Tensor:
    """``sum_d t_d`` for ``t [N, D]`` or a spherical ``t [N, 1]`` standing for ``D`` equal
    values. Returns ``[N]``."""
    if t.shape[1] == 1 and dim != 1:
        return t[:, 0] * dim
    return t.sum(1)


def expansion_features(
    terms: Sequence[tuple[Tensor, Tensor]], dim: int
) -> tuple[Tensor, Tensor]:
    """Columns ``X [N, K]``, ``Y [M, K]`` with ``X @ Y.T = sum_t sum_d a_t[i, d] b_t[j, d]``.

    Each term pairs an image quantity ``a [N, D] | [N, 1]`` with a caption quantity
    ``b [M, D] | [M, 1]``; a width-1 quantity stands for ``D`` equal values and is never
    expanded: ``[N,1] . [M,D]`` becomes one column ``a`` against ``sum_d b``.
    """
    xs, ys = [], []
    for a, b in terms:
        wa, wb = a.shape[1], b.shape[1]
        if wa == wb == dim:
            xs.append(a)
            ys.append(b)
        elif wa == dim:  # b spherical
            xs.append(a.sum(1, keepdim=True))
            ys.append(b)
        elif wb == dim:  # a spherical
            xs.append(a)
            ys.append(b.sum(1, keepdim=True))
        else:  # both spherical
            xs.append(a)
            ys.append(b * dim)
    return torch.cat(xs, 1), torch.cat(ys, 1)


def rowwise_dot(a: Tensor, b: Tensor, out: Tensor | None = None, chunk_bytes: int = 2**21) -> Tensor:
    """``sum_d a[i, d] * b[i, d]`` for ``a, b [n, D]`` (strided views allowed), ``[n]``.

    No autograd. The products go through one reused ``chunk_bytes`` buffer that stays in
    cache, so this is about 3x faster than ``torch.linalg.vecdot`` (which allocates the
    whole ``[n, D]`` product) on the large feature matrices of the pairwise scores.
    """
    n, dim = a.shape
    out = a.new_empty(n) if out is None else out
    rows = max(1, chunk_bytes // max(1, dim * a.element_size()))
    tmp = a.new_empty(min(rows, max(n, 1)), dim)
    for i in range(0, n, rows):
        j = min(i + rows, n)
        torch.sum(torch.mul(a[i:j], b[i:j], out=tmp[: j - i]), 1, out=out[i:j])
    return out
