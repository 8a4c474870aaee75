"""The TensorBoard logger of a run (``train.loggers: [jsonl, tensorboard]``): scalars in ``RUN/tensorboard``.

Written with TensorBoard's own writer (``torch.utils.tensorboard.SummaryWriter``, which needs the
``tensorboard`` package: ``pip install 'pcmr[tensorboard]'``). It reads the events the trainer
writes to its log and turns them into scalars:

- every logged step (``train.log_every``), x = the global step: ``loss/<term>`` for each loss term
  (``loss/loss`` is the total), ``train/lr``, ``train/pairs_per_s``, ``train/data_s``, ``train/compute_s``, the match-probability
  parameters ``match_prob/a`` and ``match_prob/b`` (PCME eq. 2, ``sigmoid(-a d + b)``) when the loss
  has them, and ``uncertainty/<modality>_logvar_mean``, the batch mean of the log-variances of the
  image and caption Gaussians when the model has them;
- every epoch, x = the epoch: ``val/<metric>`` (the validation metrics, e.g. ``val/rsum``,
  ``val/r_precision``), ``epoch/<term>`` (the epoch means of the loss terms) and ``epoch/seconds``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import tensorboard  # noqa: F401  (the optional package SummaryWriter needs; imported so its absence is clear)
from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardLog", "TENSORBOARD_DIR"]

TENSORBOARD_DIR = "tensorboard"
_STEP_FIELDS = {"epoch", "step_in_epoch", "global_step", "images_per_s"}
_MATCH_PROB = {"a", "b"}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _tag(name: str) -> str:
    if name in _MATCH_PROB:
        return f"match_prob/{name}"
    if name.endswith("_logvar_mean"):
        return f"uncertainty/{name}"
    if name in ("lr", "pairs_per_s", "data_s", "compute_s"):
        return f"train/{name}"
    return f"loss/{name}"


class TensorBoardLog:
    """Scalars of the step and epoch events of a run, in ``run_dir / "tensorboard"`` (rank 0 only)."""

    def __init__(self, run_dir: Path) -> None:
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def write(self, event: str, **fields: Any) -> None:
        """Turn a ``step`` or ``epoch`` event into scalars; other events carry none."""
        if event == "step":
            step = int(fields.get("global_step", 0))
            for name, value in fields.items():
                number = _number(value)
                if name not in _STEP_FIELDS and number is not None:
                    self.writer.add_scalar(_tag(name), number, step)
        elif event == "epoch":
            epoch = int(fields.get("epoch", 0))
            for group, values in (("val", fields.get("val")), ("epoch", fields.get("train"))):
                for name, value in (values or {}).items():
                    number = _number(value)
                    if number is not None:
                        self.writer.add_scalar(f"{group}/{name}", number, epoch)
            for name in ("seconds", "data_seconds", "compute_seconds"):
                seconds = _number(fields.get(name))
                if seconds is not None:
                    self.writer.add_scalar(f"epoch/{name}", seconds, epoch)
        else:
            return
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()
