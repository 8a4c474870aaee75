"""The one check of a score matrix used by ``pcmr.metrics`` and ``pcmr.inference``."""

from __future__ import annotations

import torch
from torch import Tensor


def check_scores(scores: Tensor, name: str = "scores", *, finite: bool = False) -> Tensor:
    """Check that ``scores`` is a floating-point matrix ``[Q, G]`` without NaN and return it.

    ``finite=False`` (metrics): ``+-inf`` are allowed (an item that can never / always win) and
    either side may be empty. ``finite=True`` (re-rankers, which add and exponentiate scores): every
    value must be finite and ``Q, G >= 1``.
    """
    if not isinstance(scores, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape [Q, G], got {type(scores).__name__}")
    if scores.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor [Q, G] (queries x gallery), got shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {scores.dtype}")
    if finite:
        if scores.shape[0] == 0 or scores.shape[1] == 0:
            raise ValueError(
                f"{name} must have at least one query and one gallery item, got shape {tuple(scores.shape)}")
        low, high = torch.aminmax(scores)  # one pass, no temporary; NaN propagates
        if not (bool(torch.isfinite(low)) and bool(torch.isfinite(high))):
            num_nan = int(torch.isnan(scores).sum())
            num_inf = int(torch.isinf(scores).sum())
            raise ValueError(f"{name} must be finite; it holds {num_nan} NaN and {num_inf} infinite value(s)")
        return scores
    # A NaN makes the sum NaN (so does inf - inf); only then look element-wise.
    if bool(torch.isnan(scores.sum())) and bool(torch.isnan(scores).any()):
        count = int(torch.isnan(scores).sum())
        raise ValueError(f"{name} contains {count} NaN value(s); every score must be a number")
    return scores


def check_positive_int(value: int, name: str, upper: int | None = None, upper_name: str = "") -> int:
    """Check ``1 <= value (<= upper)`` for an integer parameter and return it as ``int``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be <= {upper_name} = {upper}, got {value}")
    return value
