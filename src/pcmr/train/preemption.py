"""Preemption: SIGTERM / SIGINT end training after the current step, with a checkpoint.

Clusters send SIGTERM before they preempt or time out a job, and Ctrl-C sends SIGINT.
:class:`StopRequest` records the signal instead of dying; the trainer checks it after every
step (all processes agree on it), writes a checkpoint from rank 0 and raises
:class:`TrainingInterrupted`, whose message ends with the command that resumes the run.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Any

__all__ = ["STOP_SIGNALS", "StopRequest", "TrainingInterrupted", "resume_command"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def resume_command(run_dir: Path, world_size: int = 1) -> str:
    """The command that continues ``run_dir`` (with ``--nproc`` when it ran in several processes)."""
    command = f"pcmr train --resume {run_dir}"
    return command if world_size <= 1 else f"{command} --nproc {world_size}"


class TrainingInterrupted(Exception):
    """Training stopped on SIGTERM / SIGINT after a complete step and a checkpoint.

    Attributes:
        signal_number: the signal received; ``exit_code`` is ``128 + signal_number``.
        run_dir: the run folder; ``global_step``: the position saved.
    """

    def __init__(self, signal_number: int, run_dir: Path, global_step: int, world_size: int = 1) -> None:
        self.signal_number, self.run_dir, self.global_step = signal_number, run_dir, global_step
        self.exit_code = 128 + signal_number
        name = signal.Signals(signal_number).name
        super().__init__(
            f"training stopped by {name} after global step {global_step}; checkpoint saved; "
            f"resume with: {resume_command(run_dir, world_size)}"
        )


class StopRequest:
    """Records SIGTERM / SIGINT instead of dying, so the current step can finish."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signal_number: int, frame: Any) -> None:
        if self.signal_number is None:
            self.signal_number = signal_number

    def __enter__(self) -> StopRequest:
        self.signal_number = None
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread: signals stay as they are
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
