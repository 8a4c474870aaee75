"""Learning-rate schedules and optimizers for training runs.

Schedules are pure functions of the position in training (epoch, step within the
epoch), so resuming needs no hidden scheduler state: the checkpoint stores the
position and the schedule recomputes the same learning rate.

- ``cosine`` (SGDR, Loshchilov & Hutter 2017; used by PCME §4.1 / App. C.2):
  ``lr * (min + (1 - min) * 0.5 * (1 + cos(pi * t)))`` with ``t`` the fraction of the
  cosine's period done: the period is ``cosine_epochs`` (torch's ``T_max``) or the phase's
  length, ``t`` counts steps, or whole epochs with ``schedule_every: epoch`` (the PCME release
  steps its ``CosineAnnealingLR`` once per epoch); past the period the lr stays at the floor.
- ``step`` (VSE++, Faghri et al. 2018): ``lr * gamma ** floor(epoch / period)``, the period given
  in epochs (``step_epochs``) or as a share of the post-warm-up epochs (``step_fraction``), so that
  a shorter run (the study) decays at the same point of its training as the paper's.
- ``plateau``: the schedule the PVSE release (Song and Soleymani, CVPR 2019; ``train.py``) runs.
  It builds ``ReduceLROnPlateau(factor=0.5, min_lr=1e-10)``, whose mode is ``'min'`` by default, and
  steps it once per epoch with the validation rsum, which rises as training improves. In mode
  ``'min'`` the first epoch's rsum stays the best value, so every later epoch counts as one without
  improvement, and after ``patience + 1 = 11`` such epochs the lr is multiplied by 0.5: epochs 0-11
  (0-based) run at ``lr``, 12-22 at ``lr / 2``, 23-33 at ``lr / 4``. As a function of the epoch:
  ``lr * factor ** floor(max(0, epoch - 1) / (patience + 1))`` (:func:`plateau_reductions`). This
  equals the release's lr whenever no epoch's rsum falls below the lowest earlier one (by its
  relative threshold 1e-4), as on any run whose rsum does not drop below its first epoch's;
  a run that does would restart the release's count there. Its ``min_lr`` (1e-10) is not reached
  in 30 epochs and is not modelled. ``plateau_on: validation`` replays the scheduler itself on the
  validation metric of the finished epochs (:func:`plateau_reductions_on`), which the run's history
  keeps, so a resumed run recomputes the same lr.
- ``constant``.

PCME schedule (PCME §4.1, App. C.2): ``warmup_epochs`` epochs train with the
pretrained feature extractors frozen (the image backbone and the word vectors;
the caption GRU is trained, it belongs to PCME's text head) at ``lr * warmup_lr_factor``,
held constant (``warmup_schedule: constant``) or under a cosine of its own
(``warmup_schedule: cosine``); then every parameter is fine-tuned under the chosen schedule,
which starts afresh, at ``lr * finetune_lr_factor``. With ``restart_optimizer`` the
fine-tune phase also starts a fresh optimizer (new moments), as the PCME release's
``train_coco.py`` / ``train_cub.py`` do (two engines, the second loading the first's weights).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from pcmr.train.adamp import AdamP
from pcmr.train.config import ConfigError, TrainConfig
from pcmr.train.optimizers import SGD, Adam, AdamW

__all__ = ["build_optimizer", "optimizer_name", "learning_rate_factor", "loss_ramp_factor", "parameter_counts",
           "plateau_reductions",
           "plateau_reductions_on", "set_learning_rate", "trainable_backbone_parameters"]


def plateau_reductions(epoch: int, patience: int) -> int:
    """How many times ``ReduceLROnPlateau(mode='min', patience=patience, cooldown=0)`` has reduced the
    lr before epoch ``epoch`` (0-based) when stepped after every epoch with a rising metric: the first
    step sets the best value, each later one is a bad epoch, and the ``patience + 1``-th bad epoch in a
    row reduces the lr and restarts the count, i.e. ``floor(max(0, epoch - 1) / (patience + 1))``."""
    return max(0, epoch - 1) // (patience + 1)


def plateau_reductions_on(values: Sequence[float], patience: int, threshold: float = 1e-4) -> int:
    """How many times ``ReduceLROnPlateau(mode='min', threshold_mode='rel', threshold, patience, cooldown=0)``
    reduces the lr when stepped with ``values`` in turn: a value below ``best * (1 - threshold)`` is the
    new best, any other is a bad epoch, and the ``patience + 1``-th bad epoch in a row reduces the lr
    and restarts the count."""
    best, bad, reductions = math.inf, 0, 0
    for value in values:
        if value < best * (1.0 - threshold):
            best, bad = value, 0
        else:
            bad += 1
        if bad > patience:
            reductions, bad = reductions + 1, 0
    return reductions


def _validated(history: Sequence[Mapping[str, Any]], metric: str, first: int, last: int) -> list[float]:
    """The validation ``metric`` of the finished epochs ``first <= epoch < last`` (0-based) that validated."""
    return [float(record["val"][metric]) for record in history
            if first <= int(record["epoch"]) - 1 < last and isinstance(record.get("val"), Mapping)
            and metric in record["val"]]


def learning_rate_factor(config: TrainConfig, epoch: int, step_in_epoch: int, steps_per_epoch: int,
                         history: Sequence[Mapping[str, Any]] = ()) -> float:
    """Multiplier of ``config.lr`` at a position in training (``epoch`` is 0-based).

    Two phases: the warm-up (``epoch < warmup``: ``warmup_lr_factor``, constant or under its own
    cosine) and the main phase (``finetune_lr_factor`` times ``config.schedule`` counted from the
    warm-up's end). ``history``: the finished epochs' records (``{"epoch": 1-based, "val": metrics}``),
    read by the plateau schedule with ``plateau_on: validation``.
    """
    warmup = config.warmup_epoch_count()
    if epoch < warmup:
        if config.warmup_schedule == "constant":
            return config.warmup_lr_factor
        return config.warmup_lr_factor * _cosine(config, epoch, warmup, step_in_epoch, steps_per_epoch)
    phase_epoch = epoch - warmup
    if config.schedule == "constant":
        return config.finetune_lr_factor
    if config.schedule == "step":
        return config.finetune_lr_factor * config.step_gamma ** (phase_epoch // config.step_period())
    if config.schedule == "plateau":
        if config.plateau_on == "validation":
            reductions = plateau_reductions_on(_validated(history, config.select_on, warmup, epoch),
                                               config.plateau_patience)
        else:
            reductions = plateau_reductions(phase_epoch, config.plateau_patience)
        return config.finetune_lr_factor * config.plateau_factor ** reductions
    main_epochs = max(1, config.epochs - warmup)
    return config.finetune_lr_factor * _cosine(config, phase_epoch, main_epochs, step_in_epoch, steps_per_epoch)


def loss_ramp_factor(config: TrainConfig, epoch: int, step_in_epoch: int, steps_per_epoch: int) -> float:
    """The factor of the loss at a position (``epoch``, ``step_in_epoch`` 0-based): ``(step + 1) / steps``
    in epoch ``loss_ramp_epoch`` (1-based; PCME++'s release, ``pcmepp/engine.py:241-245``), else 1."""
    if config.loss_ramp_epoch is None or epoch + 1 != config.loss_ramp_epoch:
        return 1.0
    return (step_in_epoch + 1) / max(1, steps_per_epoch)


def _cosine(config: TrainConfig, phase_epoch: int, phase_epochs: int, step_in_epoch: int, steps_per_epoch: int) -> float:
    """The cosine factor at ``phase_epoch`` (0-based) of a phase: period ``cosine_epochs`` or the phase's
    length; progress in steps, or in whole epochs when ``schedule_every == "epoch"``."""
    period = config.cosine_epochs or phase_epochs
    if config.schedule_every == "epoch":
        done, total = phase_epoch, period
    else:
        steps = max(1, steps_per_epoch)
        done, total = phase_epoch * steps + step_in_epoch, period * steps
    progress = min(1.0, done / total)
    return config.min_lr_factor + (1.0 - config.min_lr_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_learning_rate(optimizer: torch.optim.Optimizer, factor: float) -> None:
    """Set every group's ``lr`` to its ``initial_lr`` times ``factor``."""
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] * factor


def trainable_backbone_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Parameters frozen during the PCME warm-up: the pretrained feature extractors.

    ``model.backbone_parameters()`` when the model defines it; otherwise, for every sub-module
    named ``backbone`` (pcmr.models towers, duplicated variance encoders included), its
    ``pretrained_parameters()`` when it defines them (the GRU text backbone: the word embeddings
    only, its GRU is trained from the start) or else all its parameters (image backbones). Only
    parameters that are trainable when the model is built are returned, so a backbone frozen for
    good (``finetune: false``) stays frozen after the warm-up.
    """
    method = getattr(model, "backbone_parameters", None)
    if callable(method):
        return [p for p in method() if p.requires_grad]
    found: dict[int, nn.Parameter] = {}
    for name, module in model.named_modules():
        if name.split(".")[-1] != "backbone":
            continue
        pretrained = getattr(module, "pretrained_parameters", None)
        for parameter in pretrained() if callable(pretrained) else module.parameters():
            if parameter.requires_grad:
                found.setdefault(id(parameter), parameter)
    return list(found.values())


def parameter_counts(model: nn.Module) -> dict[str, dict[str, int]]:
    """Trained and frozen parameter values of ``model``, in total and per part: ``image_backbone`` (the
    image tower's ``encoder.backbone``, e.g. the pretrained CNN), ``word_embedding`` (the caption
    backbone's word vectors), ``caption_backbone`` (the rest of it: the GRU, or a pretrained text model)
    and ``heads`` (everything else). A run's log records it at each phase (``phase`` lines)."""
    counts: dict[str, dict[str, int]] = {}
    for name, parameter in model.named_parameters():
        tower = name.split(".")[0]
        if "encoder.backbone." not in name:
            part = "heads"
        elif tower == "image_tower":
            part = "image_backbone"
        else:
            part = "word_embedding" if ".backbone.embedding." in name else "caption_backbone"
        for key in (part, "total"):
            entry = counts.setdefault(key, {"trainable": 0, "frozen": 0})
            entry["trainable" if parameter.requires_grad else "frozen"] += parameter.numel()
    return counts


#: ``train.optimizer`` name of each optimizer class build_optimizer creates
_OPTIMIZER_NAMES = {"AdamW": "adamw", "AdamP": "adamp", "Adam": "adam", "SGD": "sgd"}


def optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    """The ``train.optimizer`` name of ``optimizer`` (its class name when not one build_optimizer makes)."""
    return _OPTIMIZER_NAMES.get(type(optimizer).__name__, type(optimizer).__name__)


def build_optimizer(config: TrainConfig, parameters: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW (default), AdamP (as in PCME and PCME++: :class:`pcmr.train.adamp.AdamP`, the ``adamp``
    package's update with multi-tensor operations), Adam or SGD over ``parameters``: torch's optimizers
    as :mod:`pcmr.train.optimizers` defines them, without the ``torch._dynamo`` import of their first use."""
    params = [p for p in parameters if p.requires_grad]
    if not params:
        raise ConfigError("the model and loss have no trainable parameters")
    if config.amsgrad and config.optimizer not in ("adam", "adamw"):
        raise ConfigError(f"train.amsgrad applies to train.optimizer adam or adamw, not {config.optimizer!r}")
    optimizer: torch.optim.Optimizer
    if config.optimizer == "adamp":
        optimizer = AdamP(params, lr=config.lr, weight_decay=config.weight_decay)
    elif config.optimizer == "adamw":
        optimizer = AdamW(params, lr=config.lr, weight_decay=config.weight_decay, amsgrad=config.amsgrad)
    elif config.optimizer == "adam":
        optimizer = Adam(params, lr=config.lr, weight_decay=config.weight_decay, amsgrad=config.amsgrad)
    else:
        optimizer = SGD(
            params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    for group in optimizer.param_groups:
        group["initial_lr"] = group["lr"]
    return optimizer
