"""The run's loggers (``train.loggers``): the JSON-lines log and, on request, TensorBoard.

``train.loggers`` lists them by name (default ``[jsonl]``): ``jsonl`` writes ``RUN/log.jsonl``, one
JSON object per event; ``tensorboard`` writes scalar curves into ``RUN/tensorboard``
(:mod:`pcmr.train.tensorboard_log`; ``tensorboard --logdir RUN/tensorboard`` shows them). The
trainer writes each event once to a :class:`RunLog`, which hands it to every logger. Only rank 0
opens loggers; the other processes of a DDP run log nothing.

``log.jsonl`` is only ever appended to, one whole line per ``write``. A process killed in the middle
of a write (``kill -9``, a power cut) can leave a torn last line; :func:`read_jsonl` drops it, and
the next :class:`JsonlLog` opened on the file (a resumed run) cuts it off before appending.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pcmr.suggest import unknown_name
from pcmr.train.config import ConfigError

__all__ = ["LOGGERS", "EventLog", "JsonlLog", "RunLog", "check_loggers", "open_run_log", "read_jsonl"]

LOGGERS = ("jsonl", "tensorboard")


class EventLog(Protocol):
    """What a logger offers: ``write(event, **fields)`` and ``close()``."""

    def write(self, event: str, **fields: Any) -> None: ...

    def close(self) -> None: ...


class JsonlLog:
    """The append-only JSON-lines log (``RUN/log.jsonl``): one event per line, flushed as written.

    Opening a file whose last line is torn (no final newline: its writer was killed mid-line) first
    cuts that line off, in one ``truncate``, so the events appended after it stay readable.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_file():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                os.truncate(self.path, data.rfind(b"\n") + 1)
        self.handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, event: str, **fields: Any) -> None:
        """Append ``{"event": event, "time": now, **fields}`` as one line."""
        self.handle.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
        self.handle.flush()

    def close(self) -> None:
        """Close the file."""
        self.handle.close()


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a JSON-lines log. A torn last line (its writer was killed mid-line) is dropped;
    any other line that is not a JSON object raises ``ValueError`` naming the file and the line."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    events: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # no newline after it: the write was cut short
                break
            raise ValueError(f"{path}, line {number}: not a JSON object ({line[:60]!r})") from None
        if not isinstance(event, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(event).__name__}")
        events.append(event)
    return events


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
        raise ConfigError(f"config key 'train.loggers': {unknown_name('logger', unknown, LOGGERS)}")
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
