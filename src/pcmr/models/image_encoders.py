"""Image backbones: precomputed global / local features and a small CNN trained from scratch.

Every backbone reads ``batch["images"]`` and returns :class:`EncodedFeatures` (local features
``[B, R, F]`` plus a pooled ``[B, F]``), docs/models.md. The pretrained EfficientNet-Lite0 backbone is
in :mod:`pcmr.models.pretrained`; VSRN region reasoning in :mod:`pcmr.models.vsrn`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from pcmr.models.features import EncodedFeatures

__all__ = ["GlobalFeatureBackbone", "LocalFeatureBackbone", "SmallCNNBackbone", "get_images"]


def _check_feature_size(images: Tensor, feature_dim: int) -> None:
    """Precomputed features must have ``feature_dim`` entries in their last axis."""
    if images.shape[-1] != feature_dim:
        raise ValueError(
            f"batch['images'] has feature size {images.shape[-1]}; the model expects "
            f"image_encoder.feature_dim = {feature_dim}"
        )


def get_images(batch: Mapping[str, Any], rank: int, form: str) -> Tensor:
    """``batch["images"]`` checked to be a floating tensor of rank ``rank`` (``form`` names it)."""
    if "images" not in batch:
        raise ValueError(f"the batch has no 'images' entry; this image encoder expects {form}")
    images = batch["images"]
    if not isinstance(images, Tensor) or not images.is_floating_point() or images.dim() != rank:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"batch['images'] must be a floating tensor of shape {form}, got {shape}")
    return images


class GlobalFeatureBackbone(nn.Module):
    """Precomputed global features ``[B, F]`` (VSE++ with frozen ResNet features).

    ``local = images[:, None]`` (one region), ``pooled = images``. No parameters.
    """

    def __init__(self, feature_dim: int) -> None:
        super().__init__()
        self.out_dim = feature_dim

    def forward(self, batch: Mapping[str, Any]) -> EncodedFeatures:
        images = get_images(batch, 2, f"[B, F] with F = {self.out_dim} (precomputed global features)")
        _check_feature_size(images, self.out_dim)
        return EncodedFeatures(local=images.unsqueeze(1), pooled=images)  # [B, 1, F], [B, F]


class LocalFeatureBackbone(nn.Module):
    """Precomputed local features ``[B, R, F]`` (grid cells or detector regions, VSRN/PCME style).

    ``local = images``, ``pooled`` = the mean over the ``R`` regions. No parameters.
    """

    def __init__(self, feature_dim: int) -> None:
        super().__init__()
        self.out_dim = feature_dim

    def forward(self, batch: Mapping[str, Any]) -> EncodedFeatures:
        images = get_images(batch, 3, f"[B, R, F] with F = {self.out_dim} (precomputed local features)")
        _check_feature_size(images, self.out_dim)
        return EncodedFeatures(local=images, pooled=images.mean(dim=1))


class SmallCNNBackbone(nn.Module):
    """A small CNN trained from scratch on raw pixels ``[B, 3, H, W]`` (default for the built-in data).

    Each block is a 3x3 stride-2 convolution, BatchNorm and ReLU, so a 64x64 image with four
    blocks gives a 4x4 grid: ``local [B, h*w, C_last]`` and ``pooled`` its average.
    """

    def __init__(self, channels: Sequence[int], in_channels: int = 3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        previous = in_channels
        for width in channels:
            layers += [
                nn.Conv2d(previous, width, kernel_size=3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            previous = width
        self.layers = nn.Sequential(*layers)
        self.in_channels = in_channels
        self.out_dim = previous

    def forward(self, batch: Mapping[str, Any]) -> EncodedFeatures:
        images = get_images(batch, 4, f"[B, {self.in_channels}, H, W] (raw pixels)")
        if images.shape[1] != self.in_channels:
            raise ValueError(
                f"batch['images'] must have {self.in_channels} channels ([B, 3, H, W] pixels), "
                f"got shape {tuple(images.shape)}"
            )
        # channels-last memory: the same convolutions, computed by oneDNN's faster NHWC kernels on
        # CPU (1.3x the image tower's forward + backward at 48 px; docs/benchmarks.md). A finished
        # batch (pcmr.data.batch_augment.finish_images) is stored so already: no copy then
        grid = self.layers(images.contiguous(memory_format=torch.channels_last))  # [B, C, h, w]
        local = grid.flatten(2).transpose(1, 2)  # [B, h*w, C]
        return EncodedFeatures(local=local, pooled=local.mean(dim=1))
