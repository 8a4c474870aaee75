"""The registry of training objectives: ``create_loss(name, **config)`` and ``list_losses()``.

Each name maps to a module class, its configuration dataclass and the fields the
name fixes (e.g. ``triplet_max`` is ``TripletLoss`` with ``negatives="max"``).
The table is explicit: the entries are registered below, in listing order (:data:`LOSSES`, a
:class:`pcmr.registry.Registry`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pcmr.config import build_dataclass
from pcmr.losses.base import RetrievalLoss
from pcmr.losses.calibrated import CalibratedConfig, CalibratedTripletLoss
from pcmr.losses.csd import CsdConfig, CsdLoss
from pcmr.losses.hubness import HalConfig, HalLoss, HalReleasedConfig, HalReleasedLoss
from pcmr.losses.pvse import PvseConfig, PvseLoss
from pcmr.losses.soft_contrastive import PcmeConfig, PcmeLoss
from pcmr.losses.triplet import TripletConfig, TripletLoss
from pcmr.registry import Registry

__all__ = ["LOSSES", "LossEntry", "create_loss", "get_loss_entry", "list_losses"]


@dataclass(frozen=True)
class LossEntry:
    """One registered objective.

    Attributes:
        name: registry name.
        module: the ``nn.Module`` class, built as ``module(config)``.
        config: its configuration dataclass.
        fixed: config fields set by the name (a caller may repeat them, not change them).
        reference: paper and equation.
    """

    name: str
    module: type[RetrievalLoss]
    config: type
    fixed: dict[str, Any] = field(default_factory=dict)
    reference: str = ""


#: every objective by name, listed in registration order
LOSSES: Registry[LossEntry] = Registry("loss")
for _entry in (
    LossEntry("triplet_sum", TripletLoss, TripletConfig, {"negatives": "sum"}, "HAL/RGM eq.2 (SUM)"),
    LossEntry("triplet_max", TripletLoss, TripletConfig, {"negatives": "max"}, "VSE++; HAL/RGM eq.3 (MAX)"),
    LossEntry(
        "triplet_semihard", TripletLoss, TripletConfig, {"negatives": "semihard"}, "ProbVSE eq.3; GCIE eq.1"
    ),
    LossEntry("hal", HalLoss, HalConfig, {"negatives": "sum"}, "HAL/RGM eq.4 + eq.2"),
    LossEntry("max_hal", HalLoss, HalConfig, {"negatives": "max"}, "HAL/RGM eq.4 + eq.3"),
    LossEntry("hal_released", HalReleasedLoss, HalReleasedConfig, {}, "HAL authors' release (docs/losses.md)"),
    LossEntry("pcme", PcmeLoss, PcmeConfig, {}, "PCME eq.1-3, §A.1"),
    LossEntry("pcme_csd", CsdLoss, CsdConfig, {}, "PCME++ closed-form sampled distance"),
    LossEntry("calibpe", CalibratedTripletLoss, CalibratedConfig, {}, "CalibPE eq.2, 5, 7"),
    LossEntry("pvse", PvseLoss, PvseConfig, {}, "PVSE: MIL triplet MAX + diversity + MMD (PCME §3.1.1)"),
):
    LOSSES.register(_entry)


def list_losses() -> list[str]:
    """Names accepted by :func:`create_loss`, in a fixed order."""
    return LOSSES.names()


def get_loss_entry(name: str) -> LossEntry:
    """The :class:`LossEntry` of ``name``; ``ValueError`` listing the names otherwise."""
    return LOSSES.get(name)


def create_loss(name: str, **config: Any) -> RetrievalLoss:
    """Build a registered loss from its name and config overrides.

    ``None`` values are dropped (unset command-line flags never override defaults). The config
    dataclass is built by :func:`pcmr.config.build_dataclass`, the loader of every pcmr config: an
    unknown key or a wrong type raises ``pcmr.config.ConfigError`` (a ``ValueError``) naming the key
    and the accepted keys or type; a change to a field the name fixes raises ``ValueError``.

    Example:
        >>> loss_fn = create_loss("triplet_max", margin=0.2, similarity="cosine")
        >>> sorted(create_loss("pcme", lambda_unif=0.0).similarity_options())
        ['a', 'b']
    """
    entry = get_loss_entry(name)
    overrides = {key: value for key, value in config.items() if value is not None}
    for key, value in entry.fixed.items():
        if key in overrides and overrides[key] != value:
            raise ValueError(
                f"loss {name!r} fixes {key}={value!r}, got {key}={overrides[key]!r}; "
                f"choose the loss by name instead (one of {list_losses()})"
            )
    resolved = {**overrides, **entry.fixed}
    return entry.module(build_dataclass(entry.config, resolved, label=f"loss {name!r}"))
