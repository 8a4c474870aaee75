"""Cached features of frozen pretrained backbones (``train.cache_frozen_features``; docs/training.md).

A frozen pretrained backbone (EfficientNet-Lite0 on images, MiniLM on captions, ``finetune: false``)
computes the same features for a training item in every epoch when the item is not augmented. With
the cache on, a tower keeps its backbone's output per item index (``batch["image_index"]`` /
``batch["caption_index"]``) the first time it sees the item, and later batches read it back instead
of running the backbone: from the second epoch on, a step runs only the heads, the loss and the
optimiser. The values equal a fresh forward up to float rounding (the backbone runs in eval mode
without gradients either way; only the composition of the batch it ran in can differ).

Only backbones frozen by their model config are cached (``finetune: false``; a backbone that trains,
or that only a PCME warm-up freezes, is not). The cache is read only while the tower is in training
mode and its backbone is still frozen, and only for batches that carry the index key (validation, augmented views and ``encode_*`` calls of a user
run the backbone). Memory: ``N x (R + 1) x F`` numbers of the backbone's dtype for ``N`` training
items with ``R`` local features of size ``F`` each (EfficientNet-Lite0 at 224 px: 50 x 1280 floats,
256 KB per image), on the training device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from pcmr.models.features import EncodedFeatures

__all__ = ["FeatureCache", "attach_feature_caches", "loader_augments"]


class FeatureCache:
    """Backbone outputs per training item, keyed by ``batch[index_key]`` (a ``LongTensor [B]``).

    Args:
        index_key: the batch entry holding each row's item index (``"image_index"`` / ``"caption_index"``).
    """

    def __init__(self, index_key: str) -> None:
        self.index_key = index_key
        self._local: dict[int, Tensor] = {}  # item -> [R_i, F], its real (unpadded) local features
        self._pooled: dict[int, Tensor] = {}  # item -> [F]
        self._masked: bool | None = None  # whether the backbone pads (returns a mask)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._pooled)

    def features(self, backbone: Callable[[Mapping[str, Any]], EncodedFeatures],
                 batch: Mapping[str, Any]) -> EncodedFeatures:
        """``backbone(batch)``, read from the cache when every row of the batch is cached; otherwise
        run the backbone on the batch and keep its rows."""
        index = batch[self.index_key]
        if not isinstance(index, Tensor) or index.dim() != 1:
            raise ValueError(f"batch[{self.index_key!r}] must be a 1-D tensor of item indices to use the feature "
                             f"cache, got {type(index).__name__}")
        items = [int(i) for i in index.tolist()]
        if items and all(i in self._pooled for i in items):
            self.hits += len(items)
            return self._assemble(items)
        out = backbone(batch)
        if out.pooled.shape[0] != len(items) or out.local.shape[0] != len(items):
            raise ValueError(f"the backbone returned {out.pooled.shape[0]} rows for {len(items)} entries of "
                             f"batch[{self.index_key!r}]; the cache needs one row per item")
        self.misses += len(items)
        self._masked = out.mask is not None
        lengths = out.mask.sum(dim=1).tolist() if out.mask is not None else [out.local.shape[1]] * len(items)
        local, pooled = out.local.detach(), out.pooled.detach()
        for row, (item, length) in enumerate(zip(items, lengths)):
            self._local[item] = local[row, : int(length)].clone()
            self._pooled[item] = pooled[row].clone()
        return out

    def _assemble(self, items: list[int]) -> EncodedFeatures:
        pooled = torch.stack([self._pooled[i] for i in items])  # [B, F]
        locals_ = [self._local[i] for i in items]
        width = max(t.shape[0] for t in locals_)
        local = pooled.new_zeros((len(items), width, locals_[0].shape[1]))  # [B, R, F]
        for row, features in enumerate(locals_):
            local[row, : features.shape[0]] = features
        mask = None
        if self._masked:
            lengths = torch.tensor([t.shape[0] for t in locals_], device=local.device)
            mask = torch.arange(width, device=local.device)[None, :] < lengths[:, None]  # [B, R]
        return EncodedFeatures(local=local, pooled=pooled, mask=mask)


def attach_feature_caches(model: torch.nn.Module, *, image_augmented: bool, caption_augmented: bool) -> list[str]:
    """Give each tower of ``model`` whose backbone is frozen and pretrained a :class:`FeatureCache`.

    Args:
        model: a :class:`pcmr.models.RetrievalModel` (its ``image_tower`` and ``caption_tower``).
        image_augmented / caption_augmented: whether the training loader augments that modality
            (Cutout, word dropping): its features change every epoch, so caching it is refused.

    Returns the names of the towers that cache (``"image"``, ``"caption"``).

    Raises:
        ValueError: no tower has a frozen backbone with parameters, or a frozen one is augmented.
    """
    cached = []
    for name, key, augmented in (("image", "image_index", image_augmented),
                                 ("caption", "caption_index", caption_augmented)):
        tower = getattr(model, f"{name}_tower")
        backbone = tower.encoder.backbone
        if backbone is None or tower.encoder.backbone_trainable or not any(True for _ in backbone.parameters()):
            continue
        if augmented:
            option = "erase_ratio / erase_prob (Cutout)" if name == "image" else "word_dropout"
            raise ValueError(f"train.cache_frozen_features: the {name} backbone is frozen, but the loader augments "
                             f"{name}s ({option} in data.loader_options), so its features change every epoch; "
                             f"switch that augmentation off (e.g. --set data.loader_options.erase_prob=0) or the cache")
        tower.feature_cache = FeatureCache(key)
        cached.append(name)
    if not cached:
        raise ValueError("train.cache_frozen_features: no tower has a frozen pretrained backbone to cache (use "
                         "model.image_encoder.kind=efficientnet_lite0 or model.text_encoder.kind=minilm with "
                         "finetune: false)")
    return cached


def loader_augments(loader_options: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether the training loader with ``loader_options`` (``data.loader_options``) augments images
    (Cutout: a non-zero ``erase_ratio`` applied with ``erase_prob > 0``; a random resized crop,
    ``image_augment``) and captions (``word_dropout > 0``)."""
    if not loader_options.get("augment", True):
        return False, False
    ratio = loader_options.get("erase_ratio", 0.0)
    largest = max(ratio) if isinstance(ratio, (list, tuple)) and ratio else ratio
    images = (bool(largest) and float(loader_options.get("erase_prob", 1.0)) > 0.0
              or loader_options.get("image_augment", "none") != "none")
    captions = float(loader_options.get("word_dropout", 0.0)) > 0.0
    return images, captions
