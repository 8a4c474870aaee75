"""Non-finite training steps: skipped, counted in the log, and fatal after too many in a row.

A step whose loss (or, with gradient clipping, whose gradient norm) is NaN or infinite
makes no optimizer update, and the buffers its forward pass changed (batch-norm running
statistics) are put back: the model stays exactly that of the last good step. Each such step is
written to ``log.jsonl`` as a ``nonfinite`` event with the running counts. After
``train.max_nonfinite_steps`` consecutive ones the run stops with
:class:`NonFiniteLossError`; its checkpoints are untouched, so the last one holds the last
good weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["NonFiniteGuard", "NonFiniteLossError"]


class NonFiniteLossError(FloatingPointError):
    """Too many consecutive training steps had a non-finite loss or gradient norm."""


class NonFiniteGuard:
    """Counts skipped non-finite steps; raises once ``max_consecutive`` happen in a row.

    Args:
        max_consecutive: consecutive non-finite steps tolerated (>= 1); the next one raises.
        run_dir: the run folder, named in the error's resume hint.
    """

    def __init__(self, max_consecutive: int, run_dir: Any = None) -> None:
        if max_consecutive < 1:
            raise ValueError(f"max_nonfinite_steps must be >= 1, got {max_consecutive}")
        self.max_consecutive = int(max_consecutive)
        self.run_dir = run_dir
        self.consecutive = 0
        self.total = 0
        self._buffers: list[tuple[Tensor, Tensor]] = []

    def snapshot(self, modules: Iterable[nn.Module]) -> None:
        """Copy the buffers of ``modules`` before a step's forward pass (restored if the step is skipped)."""
        self._buffers = [(buffer, buffer.detach().clone()) for module in modules for buffer in module.buffers()]

    def good_step(self) -> None:
        """An optimizer update was made: the consecutive count starts again."""
        self.consecutive = 0
        self._buffers = []

    def skip(self, what: str, value: Tensor, log: Any, position: dict[str, int]) -> dict[str, float]:
        """Record a skipped step (``what`` = "loss" or "gradient norm") in ``log``; raise after too many.

        ``position`` holds the 1-based ``epoch``, ``step_in_epoch`` and ``global_step`` of the step.
        Returns the (empty) loss terms of the step.
        """
        with torch.no_grad():
            for buffer, saved in self._buffers:
                buffer.copy_(saved)
        self._buffers = []
        self.consecutive += 1
        self.total += 1
        shown = float(value.detach())
        log.write("nonfinite", **position, what=what, value=str(shown), consecutive=self.consecutive,
                  total=self.total)
        if self.consecutive >= self.max_consecutive:
            raise NonFiniteLossError(
                f"the training {what} was {shown} in {self.consecutive} consecutive steps (the last: epoch "
                f"{position['epoch']}, step {position['step_in_epoch']}, global step {position['global_step']}; "
                f"train.max_nonfinite_steps={self.max_consecutive}); those steps made no update and the checkpoints "
                f"in {self.run_dir}/checkpoints keep the last good weights; lower train.lr or set train.grad_clip "
                f"and start a new run"
            )
        return {}
