"""The one check of a torch device string, used by every command and entry point that takes a device.

``pcmr train``, ``evaluate``, ``search --build``/``--text``, ``serve``, ``study`` and ``demo`` (and
:func:`pcmr.load`, :meth:`pcmr.search.GalleryIndex.load`) all call :func:`resolve_device`, so a device
this machine lacks (``--device cuda`` without CUDA, ``cuda:3`` on a one-GPU machine) ends with the same
one-line :class:`DeviceError` instead of whichever torch error the first CUDA call would raise.
"""

from __future__ import annotations

import torch

__all__ = ["DeviceError", "available_devices", "resolve_device"]


class DeviceError(ValueError):
    """A device string that is not a torch device, or names a device this machine does not have."""


def _backend_available(kind: str) -> tuple[bool, int | None]:
    """``(available, device count or None when the backend does not count)`` of an accelerator type."""
    if kind == "cuda":
        return torch.cuda.is_available(), torch.cuda.device_count()
    if kind == "mps":
        backend = getattr(torch.backends, "mps", None)
        return bool(backend is not None and backend.is_available()), None
    module = getattr(torch, kind, None)  # xpu, ... : torch.<type>.is_available() where torch has it
    is_available = getattr(module, "is_available", None)
    if callable(is_available):
        count = getattr(module, "device_count", None)
        return bool(is_available()), (int(count()) if callable(count) else None)
    return True, None  # cpu, meta: always present


def available_devices() -> list[str]:
    """The device strings this machine accepts, for messages: ``["cpu"]`` plus ``cuda:0`` ... ."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _backend_available("mps")[0]:
        names.append("mps")
    return names


def resolve_device(value: str | torch.device, *, what: str = "--device") -> torch.device:
    """``value`` as a :class:`torch.device` after checking that this machine has it.

    Args:
        value: a device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``) or a ``torch.device``.
        what: the option or config field the value came from, named in the error
            (``--device``, ``train.device``).

    Raises:
        DeviceError: one line naming ``what``, the value and the devices this machine offers, e.g.
            ``--device=cuda: CUDA is not available here (devices: cpu); use --device=cpu``.
    """
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as exc:
        raise DeviceError(f"{what}={value}: not a torch device (e.g. cpu, cuda, cuda:1)") from exc
    available, count = _backend_available(device.type)
    choices = ", ".join(available_devices())
    if not available:
        name = "CUDA" if device.type == "cuda" else device.type.upper()
        raise DeviceError(f"{what}={value}: {name} is not available here (devices: {choices}); use {what}=cpu")
    if device.index is not None and count is not None and device.index >= count:
        raise DeviceError(f"{what}={value}: this machine has no {device.type} device {device.index} "
                          f"(devices: {choices})")
    return device
