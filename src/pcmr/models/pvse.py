"""PVSE (Song and Soleymani, CVPR 2019): K embeddings per item from K-head self-attention.

PVSE's polysemous instance embedding network (PIE-Net; PCME §3.1.1 restates it), on any pcmr encoder (local features
``[B, R, F]`` with a mask, pooled feature ``[B, F]``; images: grid cells of the CNN or precomputed
regions, captions: the GRU's word states)::

    a     = softmax_R(w2 tanh(w1 x))                     # [B, R, K], K attention maps (Lin et al. 2017)
    r_k   = sigmoid(fc_local(sum_r a_rk x_r))            # [B, K, D], the local residuals
    v_k   = L2(LayerNorm(fc(pooled) + r_k))              # [B, K, D], the K embeddings

``w1`` (``F -> H``, ``H = F / 2`` unless ``attention_hidden`` is set) and ``w2`` (``H -> K``) have no
bias and Xavier-uniform weights, ``fc`` and ``fc_local`` are linear layers with zero bias, as in the
authors' release. The image and caption towers return :class:`pcmr.PointSet` (``points [B, K, D]``);
the training forward also returns the points and residuals as tensors (``image_points``,
``image_residuals``, ``caption_points``, ``caption_residuals``), the inputs of the ``pvse`` loss.

The caption side is the release's ``EncoderText``: the attention reads the word embeddings
(``text_encoder.local_features: word_embeddings``) and the pooled feature is the bi-GRU's final
states (the release's default) or, with ``text_encoder.sentence_feature: last_output``, its outputs at
the last word (the release's ``--legacy`` mode, used by its COCO checkpoints); both are compared with
the release in ``tests/reference/test_reference_pvse.py``. The image side's pooled feature is pcmr's
(mean of the grid cells, then ``fc``), as the release's average pooling of its ResNet grid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pcmr.models.features import EncodedFeatures
from pcmr.models.model import Encoder, RetrievalModel, Tower
from pcmr.point_set import PointSet

__all__ = ["MultiHeadAttentionPool", "PVSEHead", "PVSEOutput", "PointSetTower", "PVSEModel"]


class MultiHeadAttentionPool(nn.Module):
    """K attention maps over local features: ``a = softmax_R(w2 tanh(w1 x))`` (PVSE; Lin et al., ICLR 2017).

    Returns ``(pooled [B, K, F], weights [B, R, K])``; padded positions get weight 0.
    """

    def __init__(self, in_dim: int, hidden_dim: int, num_heads: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(in_dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, num_heads, bias=False)
        nn.init.xavier_uniform_(self.w1.weight)
        nn.init.xavier_uniform_(self.w2.weight)

    def forward(self, local: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``local [B, R, F]``, ``mask [B, R]`` (True = real) -> ``([B, K, F], [B, R, K])``."""
        scores = self.w2(torch.tanh(self.w1(local)))  # [B, R, K]
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        weights = torch.softmax(scores, dim=1)  # over the R positions
        return torch.einsum("brk,brf->bkf", weights, local), weights


@dataclass(frozen=True)
class PVSEOutput:
    """What a PVSE head computes: ``points [B, K, D]`` (unit rows), ``residuals [B, K, D]`` (the
    sigmoid local branch, read by the diversity regulariser) and ``attention [B, R, K]``."""

    points: Tensor
    residuals: Tensor
    attention: Tensor


class PVSEHead(nn.Module):
    """PVSE's polysemous instance embedding (module docstring): features -> :class:`PVSEOutput`."""

    def __init__(
        self,
        in_dim: int,
        embed_dim: int,
        num_embeds: int,
        attention_hidden: int = 0,
        local_dim: int | None = None,
        project_pooled: bool = True,
        fc_init: str = "xavier",
    ) -> None:
        super().__init__()
        local_dim = in_dim if local_dim is None else local_dim
        hidden = attention_hidden if attention_hidden > 0 else max(1, local_dim // 2)
        self.num_embeds = num_embeds
        # project_pooled=False: the pooled feature itself when it has embed_dim values (PVSE's captions)
        self.fc = nn.Linear(in_dim, embed_dim) if project_pooled or in_dim != embed_dim else None
        self.attention = MultiHeadAttentionPool(local_dim, hidden, num_embeds)
        self.fc_local = nn.Linear(local_dim, embed_dim)
        self.layer_norm = nn.LayerNorm(embed_dim)
        # fc_init "default": the pooled branch's fc keeps PyTorch's init, as PVSE's release (its image
        # encoder's init_weights is never called); fc_local is PIE-Net's, initialised there
        for layer in (self.fc if fc_init == "xavier" else None, self.fc_local):
            if layer is not None:
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)

    def forward(self, features: EncodedFeatures) -> PVSEOutput:
        attended, weights = self.attention(features.local, features.mask)  # [B, K, F], [B, R, K]
        residuals = torch.sigmoid(self.fc_local(attended))  # [B, K, D]
        pooled = self.fc(features.pooled) if self.fc is not None else features.pooled  # [B, D]
        combined = self.layer_norm(pooled.unsqueeze(1) + residuals)  # [B, K, D]
        return PVSEOutput(F.normalize(combined, dim=-1), residuals, weights)


class PointSetTower(Tower):
    """One modality of PVSE: encoder -> :class:`PVSEHead`; ``forward`` returns a PointSet."""

    def __init__(self, encoder: Encoder, head: PVSEHead) -> None:
        super().__init__(encoder, head)

    def encode(self, batch: Mapping[str, Any]) -> PVSEOutput:
        """The head's points, residuals and attention maps for one batch."""
        return self.mean_head(self.encoder.features(batch))

    def forward(self, batch: Mapping[str, Any]) -> PointSet:
        """``PointSet`` with ``points [B, K, D]`` (its ``mean`` is their centroid)."""
        return PointSet(self.encode(batch).points)


class PVSEModel(RetrievalModel):
    """The PVSE two-tower model; the training forward adds the loss's tensors to the outputs."""

    def encode_pair(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """``{"image", "caption"}`` PointSets plus ``image_points``, ``image_residuals``,
        ``caption_points``, ``caption_residuals`` (``[B, K, D]`` tensors)."""
        outputs: dict[str, Any] = {}
        for side, tower in (("image", self.image_tower), ("caption", self.caption_tower)):
            encoded = tower.encode(batch)  # type: ignore[operator]
            outputs[side] = PointSet(encoded.points)
            outputs[f"{side}_points"] = encoded.points
            outputs[f"{side}_residuals"] = encoded.residuals
        return outputs
