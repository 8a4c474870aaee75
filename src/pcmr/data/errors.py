"""Errors and skip reports of the data loaders.

Every error a user can cause with a bad file raises :class:`DataError` (a
``ValueError``), whose message names the file, the line or key and the expected
form. A missing file raises :class:`MissingDataError`, which is both a
``DataError`` and a ``FileNotFoundError``. Loaders never drop data silently: when
asked to skip bad items (``on_error="skip"``) they record a :class:`SkippedItem`
for each and warn once with a summary.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import typing
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pcmr.config import ConfigError, build_dataclass

__all__ = ["DataError", "MissingDataError", "SkippedItem", "warn_skipped", "check_on_error", "require_file",
           "require_dir", "read_text_lines", "read_json", "require_key", "check_settings", "require_nonempty"]


class DataError(ValueError):
    """A data file, key or argument is not in the expected form.

    The message reads ``"<path>, <location>: <problem>; expected <form>"``.
    """

    def __init__(
        self,
        problem: str,
        *,
        path: str | os.PathLike | None = None,
        location: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.location = location
        self.problem = problem
        self.expected = expected
        where = ", ".join(part for part in (self.path, location) if part)
        message = f"{where}: {problem}" if where else problem
        if expected:
            message += f"; expected {expected}"
        super().__init__(message)


class MissingDataError(DataError, FileNotFoundError):
    """A file or folder a loader needs does not exist."""


@dataclass(frozen=True)
class SkippedItem:
    """One item a loader left out (only with ``on_error="skip"``), and why."""

    path: str
    location: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}, {self.location}: {self.reason}"


def check_on_error(on_error: str) -> None:
    """Validate the ``on_error`` argument of a loader (``"raise"`` or ``"skip"``)."""
    if on_error not in ("raise", "skip"):
        raise DataError(f"on_error={on_error!r} is not supported", location="on_error", expected="'raise' or 'skip'")


def warn_skipped(dataset: str, skipped: Sequence[SkippedItem], *, show: int = 5) -> None:
    """Warn once that ``len(skipped)`` items were left out of ``dataset``, listing the first few."""
    if not skipped:
        return
    lines = "\n  ".join(str(item) for item in skipped[:show])
    more = f"\n  ... and {len(skipped) - show} more (see split.skipped)" if len(skipped) > show else ""
    warnings.warn(f"{dataset}: skipped {len(skipped)} item(s):\n  {lines}{more}", UserWarning, stacklevel=3)


def require_file(path: str | os.PathLike, what: str) -> None:
    """Raise :class:`MissingDataError` unless ``path`` is an existing file."""
    if not os.path.isfile(path):
        raise MissingDataError("file not found", path=path, expected=what)


def require_dir(path: str | os.PathLike, what: str) -> None:
    """Raise :class:`MissingDataError` unless ``path`` is an existing folder."""
    if not os.path.isdir(path):
        raise MissingDataError("folder not found", path=path, expected=what)


def read_text_lines(path: str | os.PathLike, what: str) -> list[str]:
    """Read a UTF-8 text file as lines (without line ends); bad encoding names the line."""
    require_file(path, what)
    with open(path, "rb") as handle:
        raw = handle.read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as err:
            raise DataError(
                f"line is not valid UTF-8 ({err.reason} at byte {err.start})",
                path=path,
                location=f"line {number}",
                expected="UTF-8 text",
            ) from None
    return out


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Parse a JSON file; a missing, non-UTF-8, malformed or truncated file raises one clear error."""
    require_file(path, what)
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataError(f"not valid UTF-8 ({err.reason})", path=path, location=f"line {line}", expected=what) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        problem = "truncated JSON" if err.pos >= len(text.rstrip()) else f"malformed JSON ({err.msg})"
        raise DataError(problem, path=path, location=f"line {err.lineno} column {err.colno}", expected=what) from None


def require_key(record: object, key: str, kind: type | tuple[type, ...], *, path: str | os.PathLike,
                location: str) -> Any:
    """``record[key]`` checked to be of ``kind``; otherwise a :class:`DataError` naming ``location.key``."""
    if not isinstance(record, dict):
        raise DataError(f"is a {type(record).__name__}", path=path, location=location, expected="a JSON object")
    if key not in record:
        raise DataError(f"missing key {key!r}", path=path, location=location, expected=f"a {key!r} entry")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise DataError(f"{key!r} is a {type(value).__name__}", path=path, location=f"{location}.{key}",
                        expected=names)
    return value


def check_settings(loader: Callable[..., object], settings: dict[str, object], *, dataset: str,
                   fixed: Sequence[str] = ("split",)) -> None:
    """Refuse loader settings that ``loader`` does not take, or whose type does not match its signature.

    The settings are read by ``pcmr.config.build_dataclass`` (the one configuration engine) against a
    dataclass made from ``loader``'s keyword parameters and annotations; its error becomes a
    :class:`DataError` naming the setting and what it accepts (instead of the ``TypeError`` of a bad
    keyword argument). ``fixed`` are parameters given by the caller, not settings.
    """
    signature = inspect.signature(loader)
    try:
        hints = typing.get_type_hints(loader)
    except (NameError, TypeError):  # an annotation that cannot be resolved: names are still checked
        hints = {}
    accepted = [(name, hints.get(name, Any), dataclasses.field(default=None))
                for name, p in signature.parameters.items()
                if name not in fixed and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    schema = dataclasses.make_dataclass(f"{dataset}_settings", accepted)
    try:
        build_dataclass(schema, settings, label=f"{dataset} setting")
    except ConfigError as exc:
        raise DataError(str(exc)) from None


def require_nonempty(num_images: int, num_captions: int, *, path: str | os.PathLike, split: str,
                     skipped: int = 0) -> None:
    """A split with no image or no caption is an error naming the file it was read from."""
    if num_images == 0 or num_captions == 0:
        left_out = f"; {skipped} item(s) were skipped as bad" if skipped else ""
        raise DataError(f"split {split!r} is empty ({num_images} images, {num_captions} captions{left_out})",
                        path=path, location="split", expected="at least one image with a caption")
