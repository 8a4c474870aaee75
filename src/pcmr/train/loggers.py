"""The run's loggers (``train.loggers``): the JSON-lines log and, on request, TensorBoard.

``train.loggers`` lists them by name (default ``[jsonl]``): ``jsonl`` writes ``RUN/log.jsonl``, one
JSON object per event; ``tensorboard`` writes scalar curves into ``RUN/tensorboard``
(:mod:`pcmr.train.tensorboard_log`; ``tensorboard --logdir RUN/tensorboard`` shows them). The
trainer writes each event once to a :class:`RunLog`, which hands it to every logger. Only rank 0
opens loggers; the other processes of a DDP run log nothing.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pcmr.train.config import ConfigError

__all__ = ["LOGGERS", "EventLog", "RunLog", "check_loggers", "open_run_log"]

LOGGERS = ("jsonl", "tensorboard")


class EventLog(Protocol):
    """What a logger offers: ``write(event, **fields)`` and ``close()``."""

    def write(self, event: str, **fields: Any) -> None: ...

    def close(self) -> None: ...


class RunLog:
    """Several loggers behind one ``write``/``close``."""

    def __init__(self, loggers: Sequence[EventLog]) -> None:
        self.loggers = list(loggers)

    def write(self, event: str, **fields: Any) -> None:
        """Hand the event to every logger."""
        for logger in self.loggers:
            logger.write(event, **fields)

    def close(self) -> None:
        """Close every logger (all of them, even when one fails; the first error is raised after)."""
        errors = []
        for logger in self.loggers:
            try:
                logger.close()
            except Exception as error:  # noqa: BLE001 - re-raised below once all are closed
                errors.append(error)
        if errors:
            raise errors[0]


def check_loggers(names: Sequence[str]) -> None:
    """``train.loggers`` names known loggers, each once; ``tensorboard`` needs its package."""
    unknown = [name for name in names if name not in LOGGERS]
    if unknown:
        raise ConfigError(f"config key 'train.loggers': unknown logger(s) {', '.join(map(repr, unknown))}; "
                          f"accepted: {', '.join(LOGGERS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"config key 'train.loggers' names a logger twice: {list(names)}")
    if "tensorboard" in names and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("config key 'train.loggers' asks for tensorboard, but the tensorboard package is not "
                          "installed: pip install 'pcmr[tensorboard]'")


def open_run_log(names: Sequence[str], run_dir: Path, jsonl: Callable[[], EventLog]) -> RunLog:
    """The loggers ``names`` of the run in ``run_dir`` (``jsonl`` opens the JSON-lines log)."""
    check_loggers(names)
    loggers: list[EventLog] = []
    for name in names:
        if name == "jsonl":
            loggers.append(jsonl())
        else:
            from pcmr.train.tensorboard_log import TensorBoardLog

            loggers.append(TensorBoardLog(run_dir))
    return RunLog(loggers)
