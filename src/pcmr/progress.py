"""Progress reporting: tqdm bars on a terminal only, plain lines everywhere else.

A setting is ``True`` (bars, forced: ``--progress``), ``False`` (no bars) or ``None`` (automatic:
bars only when standard error is a terminal). Output redirected to a file (``pcmr train ... > log
2>&1``) therefore holds the plain per-epoch lines and no bar frames.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

__all__ = ["progress_enabled", "progress_bar", "write_line"]


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
