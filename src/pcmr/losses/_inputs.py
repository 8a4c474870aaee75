"""Validation of the inputs every loss shares: score matrices, relevance masks, Gaussians.

A user (or a data loader) can cause each of these errors, so each raises one
``ValueError`` that names the argument and the expected form.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian

NEGATIVE_MODES = ("sum", "max", "semihard")
REDUCTIONS = ("sum", "mean")


def check_scores_and_positives(scores: Tensor, positives: Tensor) -> None:
    """``scores`` must be a floating ``[B_img, B_cap]`` matrix and ``positives`` a bool
    matrix of the same shape on the same device."""
    if not isinstance(scores, Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        shape = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a floating tensor of shape [B_img, B_cap], got {shape}")
    check_positives(positives, scores.shape[0], scores.shape[1])
    if positives.device != scores.device:
        raise ValueError(
            f"positives must be on the device of scores ({scores.device}), got {positives.device}"
        )


def check_positives(positives: Tensor, num_images: int, num_captions: int) -> None:
    """``positives`` must be a ``torch.bool`` tensor of shape ``[num_images, num_captions]``."""
    if not isinstance(positives, Tensor):
        raise ValueError(
            f"positives must be a bool tensor of shape [B_img, B_cap] = [{num_images}, {num_captions}], "
            f"got {type(positives).__name__}"
        )
    if positives.dtype != torch.bool:
        raise ValueError(f"positives must have dtype torch.bool (the in-batch relation), got {positives.dtype}")
    if tuple(positives.shape) != (num_images, num_captions):
        raise ValueError(
            f"positives must have shape [B_img, B_cap] = [{num_images}, {num_captions}], "
            f"got {tuple(positives.shape)}"
        )


def check_gaussian_pair(image: Gaussian, caption: Gaussian, positives: Tensor) -> None:
    """``image`` and ``caption`` must be :class:`pcmr.Gaussian` batches of one dimension,
    dtype and device, and ``positives`` their ``[B_img, B_cap]`` relation."""
    for name, value in (("image", image), ("caption", caption)):
        if not isinstance(value, Gaussian):
            raise ValueError(f"{name} must be a pcmr.Gaussian, got {type(value).__name__}")
    if image.dim != caption.dim:
        raise ValueError(f"image and caption embeddings must share D, got {image.dim} and {caption.dim}")
    if image.dtype != caption.dtype or image.device != caption.device:
        raise ValueError(
            f"image and caption embeddings must share dtype and device, got ({image.dtype}, {image.device}) "
            f"and ({caption.dtype}, {caption.device})"
        )
    check_positives(positives, image.num, caption.num)
    if positives.device != image.device:
        raise ValueError(f"positives must be on the embeddings' device ({image.device}), got {positives.device}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_positive_number(name: str, value: float, *, allow_zero: bool = False) -> None:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or not (value >= 0 if allow_zero else value > 0):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a number {bound}, got {value!r}")

