"""Mixed precision (``train.precision``): ``fp32``, ``bf16`` or ``fp16`` through ``torch.autocast``.

Only the model forward runs under autocast (matrix products and convolutions in the
16-bit type). Its outputs are cast back to float32 before the loss
(:class:`pcmr.train.distributed.TrainStep`), and the loss runs with autocast disabled,
so the parts that need range stay float32: ``exp(logvar)``, the KL terms, sampling
``mean + exp(logvar / 2) * eps`` and the pairwise distances. ``fp16`` also scales the
loss (``torch.amp.GradScaler``) so small gradients do not underflow; ``bf16`` has
float32's exponent range and needs no scaling. ``bf16`` works on CPU and on recent GPUs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["PRECISIONS", "autocast_factory", "grad_scaler"]

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _check(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"train.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def autocast_factory(precision: str, device: torch.device) -> Callable[[], Any]:
    """A zero-argument factory of the autocast context of ``precision`` on ``device``."""
    _check(precision)
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = _DTYPES[precision]
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A ``GradScaler`` for ``fp16`` (None for ``fp32`` and ``bf16``)."""
    _check(precision)
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)
