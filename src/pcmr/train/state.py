"""Where a training run stands: the trainer's progress, saved in every checkpoint and in ``run.json``.

:class:`TrainingProgress` is what :class:`pcmr.train.Trainer` advances step by step and epoch by
epoch; a checkpoint stores it as the plain JSON object :meth:`TrainingProgress.to_dict` gives (key
``"progress"`` of the checkpoint's state) and a resumed run reads it back with
:meth:`TrainingProgress.from_dict`, so the checkpoint format is a JSON object, never a pickle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pcmr.suggest import unknown_name

__all__ = ["EpochRecord", "TrainingProgress"]

#: one finished epoch as written to ``log.jsonl`` and ``run.json``'s ``history``: ``epoch`` (1-based),
#: ``train`` (mean loss terms), ``val`` (validation metrics or None), ``seconds`` (training and validation)
EpochRecord = dict[str, Any]


@dataclass
class TrainingProgress:
    """The position of a run and its model selection so far.

    Attributes:
        epoch: epochs finished (the next epoch to train, 0-based).
        step_in_epoch: steps of the current epoch already taken (resuming skips that many batches).
        global_step: optimisation steps taken since the start of the run.
        best_metric: the best validation value of ``train.select_on`` so far (None before the first).
        best_epoch: the 1-based epoch that gave ``best_metric`` (None before the first validation).
        history: one :data:`EpochRecord` per finished epoch.
        epoch_totals: sums of the loss terms over the current epoch's steps (kept across a resume).
    """

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    best_metric: float | None = None
    best_epoch: int | None = None
    history: list[EpochRecord] = field(default_factory=list)
    epoch_totals: dict[str, float] = field(default_factory=dict)

    def position(self) -> dict[str, int]:
        """``{"epoch", "step_in_epoch", "global_step"}``, as the log's events and ``run.json`` record it."""
        return {"epoch": self.epoch, "step_in_epoch": self.step_in_epoch, "global_step": self.global_step}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (the ``"progress"`` entry of a checkpoint's state)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingProgress:
        """Read back :meth:`to_dict`'s object (a checkpoint's ``"progress"``); a key that is not a
        field raises ``ValueError`` naming it and the accepted keys."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"checkpoint progress: {unknown_name('key', unknown, names)}")
        return cls(**data)
