"""Regularisers of probabilistic embeddings: KL to the standard normal prior, uniformity.

PCME §3.2.1 and §A.1 (after HIB and Wang & Isola, ICML 2020).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from pcmr.gaussian import Gaussian

__all__ = ["kl_prior_loss", "uniformity_loss"]


def kl_prior_loss(gaussian: Gaussian, reduction: str = "mean") -> Tensor:
    """``KL(N(mean, diag(var)) || N(0, I))`` of each instance (PCME §3.2.1, after HIB).

    ``KL = 0.5 * sum_d (var_d + mean_d^2 - 1 - logvar_d)`` per instance; a spherical
    log-variance ``[N, 1]`` is broadcast over the ``D`` dimensions.

    Args:
        gaussian: ``N`` Gaussian embeddings (not points: the KL of a point mass is infinite).
        reduction: ``"mean"`` over instances (default), ``"sum"`` over instances (PCME's
            release), or ``"element_mean"``: the mean over instances *and* dimensions,
            i.e. ``"mean" / D`` (PCME++'s release).

    Returns:
        A 0-dim tensor (0 for ``N = 0``).
    """
    if not isinstance(gaussian, Gaussian):
        raise ValueError(f"kl_prior_loss expects a pcmr.Gaussian, got {type(gaussian).__name__}")
    if gaussian.is_point:
        raise ValueError(
            "kl_prior_loss needs a Gaussian with a log-variance; got a point embedding (logvar=None), "
            "whose KL to N(0, I) is infinite"
        )
    if reduction not in ("mean", "sum", "element_mean"):
        raise ValueError(f"reduction must be one of ['mean', 'sum', 'element_mean'], got {reduction!r}")
    logvar = gaussian.expanded_logvar()  # [N, D]
    per_instance = 0.5 * (logvar.exp() + gaussian.mean.pow(2) - 1.0 - logvar).sum(dim=1)  # [N]
    if reduction == "sum" or per_instance.numel() == 0:
        return per_instance.sum()
    if reduction == "element_mean":
        return per_instance.mean() / gaussian.dim
    return per_instance.mean()


def uniformity_loss(embeddings: Tensor, t: float = 2.0) -> Tensor:
    """Uniformity loss in the log-mean-exp form of Wang & Isola (2020).

    PCME eq.A.1 writes ``sum_{z, z'} exp(-2 |z - z'|^2)`` over all sampled
    embeddings ``Z`` of the batch (both modalities, all ``J`` samples). We implement
    the stable form of Wang & Isola that PCME cites::

        L_unif = log( mean_{z != z'} exp(-t |z - z'|^2) ),   t = 2

    over all pairs of distinct points (a monotone transform of eq.A.1 without its
    constant self-pairs; ordered and unordered pairs give the same mean), computed
    with one ``[N*J, N*J]`` matrix in a fused function (value and gradient in a few passes).

    Args:
        embeddings: ``[N, D]`` or ``[N, J, D]`` (samples are flattened to ``N * J`` points).
        t: temperature (2 in PCME and Wang & Isola).

    Returns:
        A 0-dim tensor (``<= 0``); 0 when there are fewer than two points.
    """
    if not isinstance(embeddings, Tensor) or embeddings.dim() not in (2, 3) or not embeddings.is_floating_point():
        shape = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else type(embeddings).__name__
        raise ValueError(f"embeddings must be a floating tensor of shape [N, D] or [N, J, D], got {shape}")
    points = embeddings.reshape(-1, embeddings.shape[-1])  # [N*J, D]
    num = points.shape[0]
    if num < 2:
        return points.sum() * 0.0
    return _Uniformity.apply(points, float(t)) - math.log(num * (num - 1))


def _underflow_cutoff(dtype: torch.dtype) -> float:
    """The exponent below which a uniformity weight ``exp(l - max l)`` is set to exactly 0.

    Half the log of the smallest normal number (float32: -43.7, about ``1e-19``; float64: -354): a
    kept weight, divided by a total of at most ``N^2``, times a coordinate above ``1e-12`` stays a
    normal number, and the dropped terms change the total by less than ``N^2 1e-19`` relative.
    float16 (whose range is too narrow for that) keeps every term whose ``exp`` is normal.
    """
    finfo = torch.finfo(dtype)
    return 0.5 * math.log(finfo.tiny) if finfo.max > 1e38 else math.log(finfo.tiny) + 1.0


class _Uniformity(torch.autograd.Function):
    """``logsumexp_{i != j} (-t |x_i - x_j|^2)`` over the rows of ``X [N, D]``, value and gradient in
    few passes over the ``N x N`` matrix (the uniformity term is the largest matrix of a PCME step).

    Forward: one matrix product of ``[x_i, |x_i|^2, 1]`` with ``[2t x_j, -t, -t |x_j|^2]`` gives
    ``l_ij = -t |x_i - x_j|^2`` directly; the diagonal is excluded, the shift ``m = min(max l, 0)``
    (rounding can make a squared distance slightly negative), and ``E = exp(l - m)`` is formed in
    place. Terms whose exponent is below :func:`_underflow_cutoff` (float32: ``E < 1e-19``) are exactly
    0: neither the ``exp`` nor the backward's matrix product then meets a subnormal number (either
    runs tens of times slower on many CPUs when it does), and the value changes by less than
    ``N^2 1e-19`` relative, the gradient by as little (the ``exp`` itself is taken of exponents raised
    to one below the cutoff: of ``-inf`` or of an underflowing exponent it is several times slower).
    The row sums of ``E`` are kept for backward.
    Backward: with ``W = E / sum E`` (the softmax weights) symmetric,
    ``d/dx_i = -4t (sum_j W_ij x_i - (W X)_i)``: one more matrix product, on ``E``, and the division by
    ``sum E`` on the ``[N, D]`` result. Six passes over the ``N x N`` matrix besides the two products.
    """

    @staticmethod
    def forward(ctx: Any, points: Tensor, t: float) -> Tensor:
        squared_norms = points.pow(2).sum(dim=1, keepdim=True)  # [N, 1]
        ones = torch.ones_like(squared_norms)
        left = torch.cat([points, squared_norms, ones], dim=1)  # [N, D + 2]
        right = torch.cat([2.0 * t * points, -t * ones, -t * squared_norms], dim=1)  # [N, D + 2]
        weights = left @ right.t()  # [N, N]: -t |x_i - x_j|^2
        weights.fill_diagonal_(float("-inf"))
        top = weights.max().clamp(max=0.0)
        # exponents below the cutoff (the diagonal among them) are raised to one below it, whose exp is a
        # normal number (exp of -inf, or of a subnormal or zero result, runs several times slower), and
        # their terms are then set to exactly 0
        cutoff = _underflow_cutoff(weights.dtype)
        weights.sub_(top).clamp_(min=cutoff - 1.0).exp_()
        torch.nn.functional.threshold(weights, math.exp(cutoff), 0.0, inplace=True)  # [N, N]: E = exp(l - m)
        row_sums = weights.sum(dim=1, keepdim=True)  # [N, 1]
        total = row_sums.sum()
        ctx.save_for_backward(points, weights, row_sums, total)
        ctx.t = t
        return top + total.log()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor, None]:
        points, weights, row_sums, total = ctx.saved_tensors
        grad = (row_sums * points - weights @ points).mul_(-4.0 * ctx.t * grad_output / total)  # [N, D]
        return grad, None
