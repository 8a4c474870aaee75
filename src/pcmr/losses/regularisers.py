"""Regularisers of probabilistic embeddings: KL to the standard normal prior, uniformity.

PCME §3.2.1 and §A.1 (after HIB and Wang & Isola, ICML 2020).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

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
    with ``logsumexp`` on one ``[N*J, N*J]`` matrix.

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
    squared_norms = points.pow(2).sum(dim=1)  # [N*J]
    squared = (squared_norms.unsqueeze(1) + squared_norms.unsqueeze(0) - 2.0 * points @ points.t()).clamp_min(0.0)
    off_diagonal = ~torch.eye(num, dtype=torch.bool, device=points.device)  # [N*J, N*J]
    exponents = (-t * squared).masked_fill(~off_diagonal, float("-inf"))  # ordered pairs z != z'
    return torch.logsumexp(exponents.flatten(), dim=0) - math.log(num * (num - 1))
