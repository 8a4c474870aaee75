"""Heads: encoder features -> mean ``[B, D]`` and log-variance ``[B, D]`` / ``[B, 1]``.

- Linear heads (VSE++ projection; ProbVSE §4.1 and GCIE §2 use a second, independent linear
  layer for the log-variance).
- PCME heads (PCME §3.2, Fig. 3): ``mean = L2(LN(fc(pooled) + sigmoid(fc_attn(attn_pool(local)))))``
  and ``logvar = fc(pooled) + fc_attn(attn_pool(local))`` (no sigmoid, LayerNorm or L2), where
  ``attn_pool`` is the PVSE self-attention pooling ``softmax_R(w2 tanh(w1 x))``.
- Identity heads (VSE++ and ProbVSE captions): the embedding *is* the encoder's sentence feature
  (the final GRU state, hidden size = ``D``), L2-normalised; the log-variance is the feature of the
  duplicated encoder (ProbVSE §4.1: "we duplicate the GRU layer"); a single spherical value
  (``spherical_one_value``) cannot be a ``D``-dimensional state, so there one linear layer maps it
  to the one value.
- Covariance (ProbVSE §4.1, GCIE §2): ``ellipsoidal`` (D values); two spherical poolings of D
  predicted log-variances into one: ``spherical_avgpool_variance`` (ProbVSE §4.1: "the average of
  the variances", ``log mean_d exp(logvar_d)``) and ``spherical_avgpool_logvar`` (GCIE §3 training
  details: "the mean of the log variances", a geometric mean of the variances);
  ``spherical_one_value`` (one predicted value).
- Optional initial log-variance ``logvar_init``: the output bias of the variance head is set so
  that ``logvar`` starts at that value (PCME head: the bias of the pooled branch; the attention
  branch's bias is zeroed), the weights keep their default init (an input-dependent part of a few
  tenths). With unit-norm means in ``D`` dimensions, PyTorch's default (``logvar ~ 0``) gives
  samples whose noise has norm ``~sqrt(D)``, far larger than the means.
- Optional smooth variance bounds ``sigma^2 in [lo, hi]`` (ProbVSE/GCIE: [0.1, 10]):
  ``logvar = c + h * tanh((raw - c) / h)`` with ``c, h`` the centre and half-width of
  ``[log lo, log hi]``; identity near the centre (slope 1), saturating smoothly at the bounds.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pcmr.models.config import HeadConfig
from pcmr.models.features import EncodedFeatures

__all__ = [
    "AttentionPool",
    "IdentityMeanHead",
    "IdentityVarianceHead",
    "LinearMeanHead",
    "LinearVarianceHead",
    "PCMEMeanHead",
    "PCMEVarianceHead",
    "bound_logvar",
    "build_mean_head",
    "initial_raw_logvar",
    "build_variance_head",
]


def bound_logvar(raw: Tensor, lo: float, hi: float) -> Tensor:
    """Smoothly map ``raw`` log-variances into ``[log lo, log hi]`` (variances in ``[lo, hi]``).

    ``c + h * tanh((raw - c) / h)``, ``c = (log lo + log hi) / 2``, ``h = (log hi - log lo) / 2``:
    slope 1 at ``c``, never outside the bounds (a final clamp removes rounding at full
    saturation), gradients everywhere. Same shape as ``raw``.
    """
    log_lo, log_hi = math.log(lo), math.log(hi)
    centre, half = 0.5 * (log_lo + log_hi), 0.5 * (log_hi - log_lo)
    bounded = centre + half * torch.tanh((raw - centre) / half)
    return bounded.clamp(log_lo, log_hi)  # only rounding at full saturation, where tanh' = 0 already


class AttentionPool(nn.Module):
    """PVSE/PCME self-attention pooling over local features (one head).

    ``a = softmax_R(w2 tanh(w1 x))`` (padded positions excluded), output ``sum_r a_r x_r``.
    ``w2`` has no bias: a constant shift cannot change a softmax.
    """

    def __init__(self, in_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(in_dim, hidden_dim)
        self.w2 = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, local: Tensor, mask: Tensor | None = None) -> Tensor:
        """``local [B, R, F]``, ``mask [B, R]`` (True = real) -> ``[B, F]``."""
        scores = self.w2(torch.tanh(self.w1(local))).squeeze(-1)  # [B, R]
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=1)  # [B, R]
        return torch.einsum("br,brf->bf", weights, local)  # [B, F]


def initial_raw_logvar(config: HeadConfig) -> float | None:
    """The raw (pre-bounds) output bias giving ``logvar = config.logvar_init``; ``None`` when unset.

    Without bounds it is ``logvar_init``; with ``variance_bounds`` the inverse of
    :func:`bound_logvar`, ``c + h * atanh((logvar_init - c) / h)``.
    """
    if config.logvar_init is None:
        return None
    value = float(config.logvar_init)
    if config.variance_bounds is None:
        return value
    log_lo, log_hi = math.log(config.variance_bounds[0]), math.log(config.variance_bounds[1])
    centre, half = 0.5 * (log_lo + log_hi), 0.5 * (log_hi - log_lo)
    ratio = (value - centre) / half
    if not -1.0 < ratio < 1.0:
        raise ValueError(
            f"logvar_init {value!r} must lie strictly inside the log of variance_bounds "
            f"({log_lo:.4g}, {log_hi:.4g})"
        )
    return centre + half * math.atanh(ratio)


def _logvar_width(config: HeadConfig, embed_dim: int) -> int:
    return 1 if config.covariance == "spherical_one_value" else embed_dim


def pool_spherical(raw: Tensor, covariance: str) -> Tensor:
    """One log-variance from ``D`` predicted ones, ``raw [B, D] -> [B, 1]``.

    ``spherical_avgpool_variance`` (ProbVSE §4.1): ``log((1/D) sum_d exp(raw_d))``, the log of the
    mean variance; ``spherical_avgpool_logvar`` (GCIE §3): ``(1/D) sum_d raw_d``, the log of the
    geometric mean. The first is never below the second (Jensen). Other kinds: ``raw`` unchanged.
    """
    if covariance == "spherical_avgpool_variance":
        return torch.logsumexp(raw, dim=1, keepdim=True) - math.log(raw.shape[1])  # [B, 1]
    if covariance == "spherical_avgpool_logvar":
        return raw.mean(dim=1, keepdim=True)  # [B, 1]
    return raw


def _finish_logvar(raw: Tensor, config: HeadConfig) -> Tensor:
    """Covariance pooling then optional bounds: ``raw [B, D] or [B, 1]`` -> logvar."""
    raw = pool_spherical(raw, config.covariance)
    if config.variance_bounds is not None:
        raw = bound_logvar(raw, config.variance_bounds[0], config.variance_bounds[1])
    return raw


class LinearMeanHead(nn.Module):
    """VSE++ image/caption projection: ``mean = fc(pooled)``, L2-normalised when asked. ``[B, D]``."""

    def __init__(self, in_dim: int, embed_dim: int, normalize: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, embed_dim)
        self.normalize = normalize

    def forward(self, features: EncodedFeatures) -> Tensor:
        mean = self.fc(features.pooled)  # [B, D]
        return F.normalize(mean, dim=-1) if self.normalize else mean


class LinearVarianceHead(nn.Module):
    """Independent linear layer for the log-variance (ProbVSE, GCIE): ``[B, D]`` or ``[B, 1]``."""

    def __init__(self, in_dim: int, embed_dim: int, config: HeadConfig) -> None:
        super().__init__()
        self.config = config
        self.fc = nn.Linear(in_dim, _logvar_width(config, embed_dim))
        raw = initial_raw_logvar(config)
        if raw is not None:
            nn.init.constant_(self.fc.bias, raw)

    def forward(self, features: EncodedFeatures) -> Tensor:
        return _finish_logvar(self.fc(features.pooled), self.config)


def _check_identity_width(in_dim: int, embed_dim: int) -> None:
    if in_dim != embed_dim:
        raise ValueError(
            f"head kind 'identity' uses the encoder's feature as the embedding, so its size ({in_dim}; for the "
            f"gru text encoder text_encoder.hidden_dim) must equal embed_dim ({embed_dim})"
        )


class IdentityMeanHead(nn.Module):
    """VSE++ caption embedding: the encoder's sentence feature itself (the final GRU state),
    L2-normalised when asked. No parameters. ``[B, D]``."""

    def __init__(self, in_dim: int, embed_dim: int, normalize: bool) -> None:
        super().__init__()
        _check_identity_width(in_dim, embed_dim)
        self.normalize = normalize

    def forward(self, features: EncodedFeatures) -> Tensor:
        mean = features.pooled  # [B, D]
        return F.normalize(mean, dim=-1) if self.normalize else mean


class IdentityVarianceHead(nn.Module):
    """ProbVSE caption log-variance: the duplicated encoder's sentence feature itself (``[B, D]``),
    then the covariance pooling and bounds; ``spherical_one_value`` maps it to one value with a
    linear layer (``[B, 1]``)."""

    def __init__(self, in_dim: int, embed_dim: int, config: HeadConfig) -> None:
        super().__init__()
        _check_identity_width(in_dim, embed_dim)
        self.config = config
        self.fc = nn.Linear(in_dim, 1) if config.covariance == "spherical_one_value" else None
        raw = initial_raw_logvar(config)
        if raw is not None:
            if self.fc is None:
                raise ValueError(
                    "logvar_init needs a variance layer with a bias; head kind 'identity' has none unless "
                    "covariance is spherical_one_value"
                )
            nn.init.constant_(self.fc.bias, raw)

    def forward(self, features: EncodedFeatures) -> Tensor:
        raw = self.fc(features.pooled) if self.fc is not None else features.pooled
        return _finish_logvar(raw, self.config)


class _PCMEBranches(nn.Module):
    """``fc(pooled)`` and ``fc_attn(attn_pool(local))``, the two branches of a PCME head."""

    def __init__(self, in_dim: int, out_dim: int, attention_hidden: int) -> None:
        super().__init__()
        hidden = attention_hidden if attention_hidden > 0 else max(1, in_dim // 2)
        self.fc = nn.Linear(in_dim, out_dim)
        self.attention = AttentionPool(in_dim, hidden)
        self.fc_attn = nn.Linear(in_dim, out_dim)

    def branches(self, features: EncodedFeatures) -> tuple[Tensor, Tensor]:
        attended = self.attention(features.local, features.mask)  # [B, F]
        return self.fc(features.pooled), self.fc_attn(attended)


class PCMEMeanHead(_PCMEBranches):
    """PCME mean head ``h^mu`` (PCME Fig. 3b): ``L2(LN(fc(pooled) + sigmoid(fc_attn(attn_pool(local)))))``.

    Returns ``[B, D]`` rows of unit norm.
    """

    def __init__(self, in_dim: int, embed_dim: int, attention_hidden: int = 0) -> None:
        super().__init__(in_dim, embed_dim, attention_hidden)
        self.layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, features: EncodedFeatures) -> Tensor:
        pooled_branch, attention_branch = self.branches(features)
        mean = self.layer_norm(pooled_branch + torch.sigmoid(attention_branch))  # [B, D]
        return F.normalize(mean, dim=-1)


class PCMEVarianceHead(_PCMEBranches):
    """PCME variance head ``h^sigma`` (PCME Fig. 3c): ``fc(pooled) + fc_attn(attn_pool(local))``.

    No sigmoid, LayerNorm or L2 (PCME §3.2, App. D). Predicts the log-variance (one
    parametrisation, ``logvar``, everywhere in pcmr), then applies the covariance kind and the optional bounds.
    Returns ``[B, D]`` or ``[B, 1]``.
    """

    def __init__(self, in_dim: int, embed_dim: int, config: HeadConfig) -> None:
        super().__init__(in_dim, _logvar_width(config, embed_dim), config.attention_hidden)
        self.config = config
        raw = initial_raw_logvar(config)
        if raw is not None:
            nn.init.constant_(self.fc.bias, raw)
            nn.init.zeros_(self.fc_attn.bias)

    def forward(self, features: EncodedFeatures) -> Tensor:
        pooled_branch, attention_branch = self.branches(features)
        return _finish_logvar(pooled_branch + attention_branch, self.config)


def build_mean_head(config: HeadConfig, in_dim: int, embed_dim: int) -> nn.Module:
    """The mean head named by ``config.kind`` (``linear``, ``identity`` or ``pcme``)."""
    if config.kind == "pcme":
        return PCMEMeanHead(in_dim, embed_dim, config.attention_hidden)
    if config.kind == "identity":
        return IdentityMeanHead(in_dim, embed_dim, config.normalize_mean)
    return LinearMeanHead(in_dim, embed_dim, config.normalize_mean)


def build_variance_head(config: HeadConfig, in_dim: int, embed_dim: int) -> nn.Module:
    """The log-variance head named by ``config.kind`` (``linear``, ``identity`` or ``pcme``)."""
    if config.kind == "pcme":
        return PCMEVarianceHead(in_dim, embed_dim, config)
    if config.kind == "identity":
        return IdentityVarianceHead(in_dim, embed_dim, config)
    return LinearVarianceHead(in_dim, embed_dim, config)
