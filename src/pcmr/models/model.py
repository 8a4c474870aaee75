"""The two-tower retrieval model: image and caption towers, each an encoder plus heads.

A tower turns a batch into a :class:`pcmr.Gaussian` (docs/models.md):

- ``mean = mean_head(refine(backbone(batch)))``;
- with a ``shared`` variance source, ``logvar = variance_head(same features)`` (PCME, GIE);
- with a ``duplicate`` source, an independent copy of the *trainable* part of the encoder feeds
  the variance head (ProbVSE §4.1; GCE/GCIE captions): a trainable backbone is re-instantiated
  (fresh parameters, nothing shared), a frozen pretrained backbone is computed once and reused;
- a deterministic tower (``probabilistic: false``) returns a point (``logvar = None``).

:class:`RetrievalModel` exposes ``encode_images(batch)``, ``encode_captions(batch)`` and
``forward(batch)`` returning ``{"image", "caption"}`` Gaussians plus ``"image_views"`` /
``"caption_views"`` means ``[B, K, D]`` when the batch carries K augmented views (the names the
losses take, docs/losses.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from pcmr.gaussian import Gaussian
from pcmr.models.config import ModelConfig
from pcmr.models.features import EncodedFeatures

__all__ = ["Encoder", "Tower", "RetrievalModel", "count_parameters"]


class Encoder(nn.Module):
    """A backbone (reads the batch) and an optional refinement stage (e.g. VSRN reasoning).

    ``backbone`` may be ``None`` only in a duplicated variance encoder whose original backbone is
    frozen: the tower then hands it the original's backbone features.
    """

    def __init__(self, backbone: nn.Module | None, refine: nn.Module | None, out_dim: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.refine = refine
        self.out_dim = out_dim

    @property
    def backbone_trainable(self) -> bool:
        """True when the backbone has parameters that require gradients."""
        return self.backbone is not None and any(p.requires_grad for p in self.backbone.parameters())

    def features(
        self, batch: Mapping[str, Any], backbone_features: EncodedFeatures | None = None
    ) -> EncodedFeatures:
        """``backbone_features`` (computed by the backbone when not given), then the refinement stage."""
        if backbone_features is None:
            if self.backbone is None:
                raise ValueError("this encoder has no backbone of its own; pass backbone_features")
            backbone_features = self.backbone(batch)
        return self.refine(backbone_features) if self.refine is not None else backbone_features


class Tower(nn.Module):
    """One modality: encoder -> mean head, and (if probabilistic) a variance branch.

    Args:
        encoder: the mean branch's encoder.
        mean_head: features -> ``[B, D]``.
        variance_head: features -> ``[B, D]`` / ``[B, 1]`` log-variance, or ``None`` (point).
        variance_encoder: the duplicated encoder of a ``duplicate`` variance source, else ``None``.
    """

    def __init__(
        self,
        encoder: Encoder,
        mean_head: nn.Module,
        variance_head: nn.Module | None = None,
        variance_encoder: Encoder | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.mean_head = mean_head
        self.variance_head = variance_head
        self.variance_encoder = variance_encoder
        # per-item backbone outputs of a frozen backbone during training (pcmr.train.feature_cache;
        # set by the trainer under train.cache_frozen_features); not a module: no parameters, no state
        self.feature_cache: Any = None

    def _backbone_features(self, batch: Mapping[str, Any]) -> EncodedFeatures | None:
        backbone = self.encoder.backbone
        if backbone is None:
            return None
        cache = self.feature_cache
        if (cache is not None and self.training and cache.index_key in batch
                and not self.encoder.backbone_trainable):
            return cache.features(backbone, batch)
        return backbone(batch)

    def forward(self, batch: Mapping[str, Any]) -> Gaussian:
        """Encode one batch into a Gaussian with ``mean [B, D]`` and ``logvar [B, D] | [B, 1] | None``."""
        backbone_features = self._backbone_features(batch)
        features = self.encoder.features(batch, backbone_features)
        mean = self.mean_head(features)  # [B, D]
        if self.variance_head is None:
            return Gaussian(mean, None)
        if self.variance_encoder is not None:
            shared = None if self.variance_encoder.backbone is not None else backbone_features
            variance_features = self.variance_encoder.features(batch, shared)
        else:
            variance_features = features
        logvar = self.variance_head(variance_features)  # [B, D] or [B, 1]
        return Gaussian(mean, logvar)


def _flatten_views(views: Tensor, name: str, min_rank: int) -> tuple[Tensor, int, int]:
    if not isinstance(views, Tensor) or views.dim() < min_rank:
        shape = tuple(views.shape) if isinstance(views, Tensor) else type(views).__name__
        raise ValueError(f"batch[{name!r}] must be a tensor of shape [B, K, ...], got {shape}")
    batch_size, num_views = views.shape[:2]
    return views.reshape(batch_size * num_views, *views.shape[2:]), batch_size, num_views


class RetrievalModel(nn.Module):
    """Image and caption towers built from a :class:`ModelConfig` (use ``pcmr.create_model``).

    Attributes:
        config: the resolved :class:`ModelConfig`.
        image_tower, caption_tower: the two :class:`Tower` modules.
    """

    def __init__(self, config: ModelConfig, image_tower: Tower, caption_tower: Tower) -> None:
        super().__init__()
        self.config = config
        self.image_tower = image_tower
        self.caption_tower = caption_tower

    @property
    def embed_dim(self) -> int:
        """The joint embedding size ``D``."""
        return self.config.embed_dim

    def encode_images(self, batch: Mapping[str, Any]) -> Gaussian:
        """``batch["images"]`` (pixels ``[B, 3, H, W]`` or features ``[B, F]`` / ``[B, R, F]``) -> Gaussian ``[B, D]``."""
        return self.image_tower(batch)

    def encode_captions(self, batch: Mapping[str, Any]) -> Gaussian:
        """``batch["captions"]``/``["caption_lengths"]`` (gru) or ``["caption_texts"]`` (minilm) -> Gaussian ``[B, D]``."""
        return self.caption_tower(batch)

    def encode_image_views(self, views: Tensor) -> Tensor:
        """Means of K augmented views: ``[B, K, 3, H, W]`` (or ``[B, K, F]`` / ``[B, K, R, F]``) -> ``[B, K, D]``."""
        flat, batch_size, num_views = _flatten_views(views, "image_views", 3)
        return self.image_tower({"images": flat}).mean.reshape(batch_size, num_views, -1)

    def encode_caption_views(self, batch: Mapping[str, Any]) -> Tensor:
        """Means of K caption views -> ``[B, K, D]``.

        gru: ``batch["caption_views"] [B, K, L]`` with ``batch["caption_view_lengths"] [B, K]``;
        minilm: ``batch["caption_view_texts"]``, a list of B lists of K strings.
        """
        if self.config.text_encoder.kind == "minilm":
            texts = batch.get("caption_view_texts")
            if (
                not isinstance(texts, (list, tuple))
                or not texts
                or not all(isinstance(t, (list, tuple)) for t in texts)
            ):
                raise ValueError(
                    "the minilm text encoder reads caption views as batch['caption_view_texts'] (B lists of K "
                    "strings); token-id views in batch['caption_views'] cannot be fed to it"
                )
            num_views = len(texts[0])
            if any(len(t) != num_views for t in texts):
                raise ValueError(
                    "batch['caption_view_texts'] must hold the same number K of views per caption"
                )
            flat_texts = [text for views in texts for text in views]
            means = self.caption_tower({"caption_texts": flat_texts}).mean
            return means.reshape(len(texts), num_views, -1)
        tokens, batch_size, num_views = _flatten_views(batch["caption_views"], "caption_views", 3)
        if "caption_view_lengths" not in batch:
            raise ValueError("the batch has 'caption_views' but no 'caption_view_lengths' [B, K]")
        lengths = batch["caption_view_lengths"]
        if not isinstance(lengths, Tensor) or tuple(lengths.shape) != (batch_size, num_views):
            shape = tuple(lengths.shape) if isinstance(lengths, Tensor) else type(lengths).__name__
            raise ValueError(
                f"batch['caption_view_lengths'] must have shape [B, K] = [{batch_size}, {num_views}], got {shape}"
            )
        means = self.caption_tower({"captions": tokens, "caption_lengths": lengths.reshape(-1)}).mean
        return means.reshape(batch_size, num_views, -1)

    def encode_pair(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """``{"image": Gaussian, "caption": Gaussian}`` of a batch (a family may add the tensors its
        loss takes, e.g. PVSE's points and residuals)."""
        return {"image": self.encode_images(batch), "caption": self.encode_captions(batch)}

    def forward(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Encode a training batch.

        Returns:
            ``{"image": Gaussian [B_img, D], "caption": Gaussian [B_cap, D]}`` plus
            ``"image_views" [B_img, K, D]`` and ``"caption_views" [B_cap, K, D]`` (means of the
            views) when the batch carries ``"image_views"`` / ``"caption_views"``
            (or ``"caption_view_texts"`` for minilm).
        """
        outputs = self.encode_pair(batch)
        if batch.get("image_views") is not None:
            outputs["image_views"] = self.encode_image_views(batch["image_views"])
        caption_view_keys = ["caption_views"]
        if self.config.text_encoder.kind == "minilm":
            caption_view_keys.append("caption_view_texts")
        if any(batch.get(key) is not None for key in caption_view_keys):
            outputs["caption_views"] = self.encode_caption_views(batch)
        return outputs

    def extra_repr(self) -> str:
        return f"name={self.config.name!r}, embed_dim={self.config.embed_dim}"


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
