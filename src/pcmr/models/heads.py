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
- PCME's caption variance head may have its own bi-GRU over the word embeddings (PCME eq. 4,
  ``variance_source: word_gru``) and may predict log sigma (``variance_output: logsigma``, the
  release), giving ``logvar = 2 log sigma``.
- Optional initial log-variance ``logvar_init``: the output bias of the variance head is set so
  that ``logvar`` starts at that value (PCME head: the bias of the pooled branch, or of the
  attention branch with a word_gru), the weights keep their init (an input-dependent part of a few
  tenths). Unset, PCME heads start as the release's (``logvar`` about 0).
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
from pcmr.models.text_encoders import last_outputs, run_gru

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
    ``w2`` has no bias: a constant shift cannot change a softmax. ``bias=False``: neither has ``w1``
    (PCME's and PVSE's releases).
    """

    def __init__(self, in_dim: int, hidden_dim: int, bias: bool = True) -> None:
        super().__init__()
        self.w1 = nn.Linear(in_dim, hidden_dim, bias=bias)
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
    """``fc(pooled)`` and ``fc_attn(attn_pool(local))``, the two branches of a PCME head.

    Initialised as PCME's release (``models/pie_model.py``, ``models/uncertainty_module.py``): the
    attention layers and ``fc_attn`` Xavier-uniform with a zero bias, ``fc`` PyTorch's default.
    ``project_pooled=False``: no ``fc``, the pooled branch is the pooled feature itself (when it has
    ``out_dim`` values, as the release's caption bi-GRU output; otherwise it is still projected).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        attention_hidden: int,
        local_dim: int | None = None,
        attention_bias: bool = True,
        project_pooled: bool = True,
    ) -> None:
        super().__init__()
        local_dim = in_dim if local_dim is None else local_dim
        hidden = attention_hidden if attention_hidden > 0 else max(1, local_dim // 2)
        # without project_pooled a pooled feature of another width (a pretrained encoder's) is still projected
        self.fc = nn.Linear(in_dim, out_dim) if project_pooled or in_dim != out_dim else None
        self.attention = AttentionPool(local_dim, hidden, bias=attention_bias)
        self.fc_attn = nn.Linear(local_dim, out_dim)
        nn.init.xavier_uniform_(self.attention.w1.weight)
        nn.init.xavier_uniform_(self.attention.w2.weight)
        nn.init.xavier_uniform_(self.fc_attn.weight)
        nn.init.zeros_(self.fc_attn.bias)

    def attention_branch(self, features: EncodedFeatures) -> Tensor:
        return self.fc_attn(self.attention(features.local, features.mask))  # [B, out]

    def branches(self, features: EncodedFeatures) -> tuple[Tensor, Tensor]:
        pooled = self.fc(features.pooled) if self.fc is not None else features.pooled
        return pooled, self.attention_branch(features)


class PCMEMeanHead(_PCMEBranches):
    """PCME mean head ``h^mu`` (PCME Fig. 3b; the release's PIE-Net):
    ``L2(LN(fc(pooled) + sigmoid(fc_attn(attn_pool(local)))))``. Returns ``[B, D]`` rows of unit norm.
    """

    def __init__(
        self,
        in_dim: int,
        embed_dim: int,
        attention_hidden: int = 0,
        local_dim: int | None = None,
        attention_bias: bool = True,
        project_pooled: bool = True,
    ) -> None:
        super().__init__(in_dim, embed_dim, attention_hidden, local_dim, attention_bias, project_pooled)
        self.layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, features: EncodedFeatures) -> Tensor:
        pooled_branch, attention_branch = self.branches(features)
        mean = self.layer_norm(pooled_branch + torch.sigmoid(attention_branch))  # [B, D]
        return F.normalize(mean, dim=-1)


class PCMEVarianceHead(_PCMEBranches):
    """PCME variance head ``h^sigma`` (PCME Fig. 3c, eq. 4): ``fc(pooled) + fc_attn(attn_pool(local))``.

    No sigmoid, LayerNorm or L2 (PCME §3.2, App. D). ``variance_source: word_gru`` (captions, PCME
    eq. 4 and the release's ``UncertaintyModuleText``): the pooled branch is the head's *own*
    bi-GRU over the local features (the word embeddings), ``embed_dim / 2`` per direction,
    concatenated, read as the text encoder reads its own (``sentence_feature``: the final states, or
    the outputs at the last word as the release does). ``variance_output: logsigma`` (the release): the sum is
    log sigma and ``logvar = 2 * sum``; ``logvar``: the sum is the log-variance. Then the covariance
    kind and the optional bounds. Returns ``[B, D]`` or ``[B, 1]``.
    """

    def __init__(
        self,
        in_dim: int,
        embed_dim: int,
        config: HeadConfig,
        local_dim: int | None = None,
        sentence_feature: str = "final_state",
    ) -> None:
        recurrent = config.variance_source == "word_gru"
        width = _logvar_width(config, embed_dim)
        super().__init__(
            in_dim, width, config.attention_hidden, local_dim, config.attention_bias, project_pooled=not recurrent
        )
        self.config = config
        self.scale = 2.0 if config.variance_output == "logsigma" else 1.0
        self.gru: nn.GRU | None = None
        self.sentence_feature = sentence_feature
        if recurrent:
            if width % 2:
                raise ValueError(f"a word_gru variance head needs an even width, got {width}")
            self.gru = nn.GRU(self.fc_attn.in_features, width // 2, batch_first=True, bidirectional=True)
        raw = initial_raw_logvar(config)
        if raw is not None:
            nn.init.constant_(self.fc.bias if self.fc is not None else self.fc_attn.bias, raw / self.scale)

    def forward(self, features: EncodedFeatures) -> Tensor:
        if self.gru is not None:
            if features.mask is None:
                raise ValueError("a word_gru variance head needs the caption padding mask")
            lengths = features.mask.sum(dim=1)  # [B]
            outputs, hidden = run_gru(self.gru, features.local, lengths)  # [B, L, D], [2, B, D / 2]
            if self.sentence_feature == "last_output":
                sentence = last_outputs(outputs, lengths)  # [B, D]
            else:
                sentence = torch.cat([hidden[-2], hidden[-1]], dim=1)  # [B, D]
            raw = sentence + self.attention_branch(features)  # [B, D]
        else:
            pooled_branch, attention_branch = self.branches(features)
            raw = pooled_branch + attention_branch
        return _finish_logvar(self.scale * raw, self.config)


def build_mean_head(config: HeadConfig, in_dim: int, embed_dim: int, local_dim: int | None = None) -> nn.Module:
    """The mean head named by ``config.kind`` (``linear``, ``identity`` or ``pcme``); ``local_dim``:
    size of the local features when it differs from the pooled ``in_dim``."""
    if config.kind == "pcme":
        return PCMEMeanHead(
            in_dim, embed_dim, config.attention_hidden, local_dim, config.attention_bias, config.project_pooled
        )
    if config.kind == "identity":
        return IdentityMeanHead(in_dim, embed_dim, config.normalize_mean)
    return LinearMeanHead(in_dim, embed_dim, config.normalize_mean)


def build_variance_head(
    config: HeadConfig,
    in_dim: int,
    embed_dim: int,
    local_dim: int | None = None,
    sentence_feature: str = "final_state",
) -> nn.Module:
    """The log-variance head named by ``config.kind`` (``linear``, ``identity`` or ``pcme``);
    ``sentence_feature``: how a word_gru head reads its GRU (the text encoder's setting)."""
    if config.kind == "pcme":
        return PCMEVarianceHead(in_dim, embed_dim, config, local_dim, sentence_feature)
    if config.kind == "identity":
        return IdentityVarianceHead(in_dim, embed_dim, config)
    return LinearVarianceHead(in_dim, embed_dim, config)
