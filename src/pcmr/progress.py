"""Progress reporting: tqdm bars on a terminal only, plain lines everywhere else.

A setting is ``True`` (bars, forced: ``--progress``), ``False`` (no bars) or ``None`` (automatic:
bars only when standard error is a terminal). Output redirected to a file (``pcmr train ... > log
2>&1``) therefore holds the plain per-epoch lines and no bar frames.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

__all__ = ["progress_enabled", "progress_bar", "write_line", "status_line", "phase"]


def _is_terminal(stream: TextIO | None) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def progress_enabled(setting: bool | None) -> bool:
    """Whether to draw bars: ``setting`` when given, else whether stderr is a terminal."""
    if setting is None:
        return _is_terminal(sys.stderr)
    return bool(setting)


def progress_bar(total: int | None, desc: str, *, enabled: bool | None = None, initial: int = 0,
                 leave: bool = True) -> tqdm | None:
    """A tqdm bar on stderr when :func:`progress_enabled`, else ``None``."""
    if not progress_enabled(enabled):
        return None
    return tqdm(total=total, initial=initial, desc=desc, leave=leave, file=sys.stderr)


def write_line(line: str, *, bars: bool = False) -> None:
    """Print one status line to stdout (through tqdm when bars are drawn, so they are not broken)."""
    if bars:
        tqdm.write(line, file=sys.stdout)
    else:
        print(line, flush=True)


def status_line(line: str, enabled: bool | None = True) -> None:
    """One progress line on stderr, on a terminal and in a redirected log alike; nothing when
    ``enabled`` is False (library calls that did not ask for progress)."""
    if enabled is not False:
        print(line, file=sys.stderr, flush=True)


@contextmanager
def phase(description: str, enabled: bool | None = True) -> Iterator[None]:
    """Start and finish lines of a long step: ``description ...`` then ``description: done in 12.3 s``
    (:func:`status_line`), so no step of a long command passes in silence."""
    started = time.perf_counter()
    status_line(f"{description} ...", enabled)
    yield
    status_line(f"{description}: done in {time.perf_counter() - started:.1f} s", enabled)
