"""SIGTERM in the commands that write outputs (``pcmr search``, ``pcmr evaluate``): the signal raises
:class:`Terminated` in the main thread, so the write in progress removes its temporary files and
releases its lock (``pcmr.atomic.write_folder``) before the command prints one line and exits
with ``128 + 15``. Python runs the handler between bytecodes, so a signal that arrives inside a long
library call (a faiss k-means) takes effect when that call returns."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import Any

from pcmr.atomic import folder_written

__all__ = ["Terminated", "run_until_terminated"]


class Terminated(Exception):
    """SIGTERM arrived while the command ran."""

    exit_code = 128 + signal.SIGTERM


def _raise(signal_number: int, frame: Any) -> None:
    raise Terminated(signal.Signals(signal_number).name)


def run_until_terminated(command: str, run: Callable[[argparse.Namespace], int], args: argparse.Namespace,
                         output: str) -> int:
    """``run(args)`` with SIGTERM raising :class:`Terminated`; on it, print one line naming ``output``
    (the path the command writes) and saying what it holds: the new content when the command's folder
    write had put it in place (:func:`pcmr.atomic.folder_written`), else the old; return ``128 + 15``."""
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread: SIGTERM stays as it is
        previous = signal.signal(signal.SIGTERM, _raise)
    try:
        return run(args)
    except Terminated:
        if folder_written(output):  # stopped after the new folder was in place
            print(f"pcmr {command}: stopped by SIGTERM after its write was complete: {output} holds the new "
                  "content (do not run the same command again to finish it)", file=sys.stderr)
        else:
            print(f"pcmr {command}: stopped by SIGTERM; its temporary files were removed and an unfinished "
                  f"write left {output} as it was", file=sys.stderr)
        return Terminated.exit_code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
