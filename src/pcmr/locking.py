"""One writer per path: a lock file ``.NAME.lock`` beside the file or folder ``NAME`` being written.

``pcmr search INDEX --build/--add``, ``pcmr evaluate --out DIR``, ``pcmr study --out DIR`` and every
:func:`pcmr.atomic.write_folder` hold :class:`PathLock` on their output while they work, so a second
writer of the same path is refused at once with :class:`PathLockedError` (naming the path and the
process that holds it) instead of silently replacing the first one's result or losing its items.

The lock belongs to the resolved path: writers through ``idx`` and through a link ``link -> idx`` take one
lock (and :func:`pcmr.atomic.write_folder` writes through the link, replacing ``idx``, never the link).
The lock is an ``flock`` on the lock file, which the operating system drops when its process ends
(``kill -9`` included): a lock is never left stale. The file records the holder's PID and work for
the message and is removed on release (a process that waited on a file removed meanwhile locks the new
one). Within one process the lock is re-entrant (a command that holds it may call
:func:`~pcmr.atomic.write_folder` on the same path). On platforms without ``fcntl`` the lock is a
no-op.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from types import TracebackType

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["PathLock", "PathLockedError", "lock_file_for"]

_HELD: dict[str, list[int]] = {}  # lock file -> [fd, depth] held by this process
_GUARD = threading.Lock()


class PathLockedError(FileExistsError):
    """Another live process is writing the path (it holds its lock file)."""


def lock_file_for(path: str | os.PathLike[str]) -> Path:
    """The lock file of ``path``: ``.NAME.lock`` in the folder holding ``path`` once symbolic links are
    resolved (``os.path.realpath``), so a path and a link to it share one lock."""
    target = Path(os.path.realpath(path))
    return target.with_name(f".{target.name}.lock")


def _holder(lock: Path) -> str:
    """Who holds ``lock`` and what it does, as its lock file records them."""
    try:
        pid, _, what = lock.read_text(encoding="utf-8").strip().partition(" ")
    except (OSError, UnicodeDecodeError):
        pid, what = "", ""
    return f"process {pid} is {what or 'writing it'}" if pid.isdigit() else "another process is writing it"


class PathLock:
    """Hold the lock of ``path`` (a context manager): ``what`` names the work, recorded in the lock
    file for the refusal another process gets, e.g. ``"writing this index"``. Raises
    :class:`PathLockedError` when another process holds it."""

    def __init__(self, path: str | os.PathLike[str], what: str = "writing it") -> None:
        self.path = Path(path)
        self.lock = lock_file_for(path)
        self.what = what
        self.key = str(self.lock)

    def acquire(self) -> PathLock:
        if fcntl is None:  # pragma: no cover - not POSIX
            return self
        with _GUARD:
            held = _HELD.get(self.key)
            if held is not None:
                held[1] += 1
                return self
            self.lock.parent.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise PathLockedError(
                        f"{self.path} is in use: {_holder(self.lock)} (lock file {self.lock}); "
                        "wait for it to finish, or choose another path") from None
                except BaseException:
                    os.close(fd)
                    raise
                try:
                    same = os.stat(self.lock).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)  # the file was removed by its previous holder while we locked it: retry
            with contextlib.suppress(OSError):  # the PID only serves the message; a full disk may refuse it
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {self.what}\n".encode())
            _HELD[self.key] = [fd, 1]
        return self

    def release(self) -> None:
        if fcntl is None:  # pragma: no cover - not POSIX
            return
        with _GUARD:
            held = _HELD.get(self.key)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del _HELD[self.key]
            with contextlib.suppress(FileNotFoundError):
                self.lock.unlink()  # before unlocking: a waiter then sees another inode and retries
            os.close(held[0])

    def __enter__(self) -> PathLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()
