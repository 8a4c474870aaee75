"""One training process per run folder: ``RUN/train.lock`` holds the owner's PID and host.

The lock file is created atomically (written under a temporary name, then hard-linked to
``train.lock``, which fails if it exists), so it is never seen half written. A second
``pcmr train`` into a folder whose lock belongs to a live process is refused with
:class:`RunLockedError`. A lock left by a process that has died (a ``kill -9``, a crashed
node) is stale: on the same host this is detected from the PID (and, on Linux, the
process start time, so a recycled PID is not mistaken for the owner, and the process
state, so an exited owner that nobody has reaped yet counts as dead) and the lock is
taken over with a warning. A lock from another host cannot be checked from here and is
refused, naming the file to delete once that run is known to be gone. In a distributed run
only rank 0 holds the lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.distributed as dist

from pcmr.atomic import move_into_place

try:
    import fcntl
except ImportError:  # not POSIX: the lock file alone still refuses a second live run
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "LOCK_FILES", "RunLock", "RunLockedError", "read_lock"]

LOCK_FILE = "train.lock"
#: the files of the lock in a run folder: the lock itself and the side file that serialises taking it
LOCK_FILES = (LOCK_FILE, f".{LOCK_FILE}.guard")


class RunLockedError(FileExistsError):
    """The run folder is in use by another live training process."""


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of Linux ``/proc/<pid>/stat`` (state, ppid, ...), or None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()  # fields after "(comm)" start at field 3


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux ``/proc/<pid>/stat`` field 22), or None if unknown."""
    fields = _stat_fields(pid)
    return fields[19] if fields else None


def _alive(pid: int) -> bool:
    """True while process ``pid`` runs. A zombie (it has exited; its parent, or the init process
    that adopted it, has not reaped it yet) holds its PID but runs no more: it counts as dead."""
    try:
        with contextlib.suppress(PermissionError):  # it exists, owned by someone else
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    fields = _stat_fields(pid)
    return not (fields and fields[0] in ("Z", "X"))  # Z: zombie, X: dead


def _rank() -> int:
    """This process's rank in a distributed run (``torch.distributed``, else torchrun's ``RANK``); 0 if none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "start_time": _start_time(pid), "since": time.time()}


def read_lock(path: Path) -> dict[str, Any] | None:
    """The owner recorded in a lock file; None when the file is missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def _stale_reason(owner: dict[str, Any] | None) -> str | None:
    """Why the recorded owner cannot be running any more (None: it may be running)."""
    if owner is None:
        return "it is unreadable"
    if owner.get("host") != socket.gethostname():
        return None
    pid = owner["pid"]
    if pid == os.getpid():
        return None
    if not _alive(pid):
        return f"process {pid} is not running"
    recorded, current = owner.get("start_time"), _start_time(pid)
    if recorded is not None and current is not None and recorded != current:
        return f"process id {pid} now belongs to another process"
    return None


class RunLock:
    """Hold ``RUN/train.lock`` while a run trains (a context manager; :meth:`acquire` / :meth:`release`)."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.held = False

    @contextlib.contextmanager
    def _guard(self, *, remove: bool = False) -> Iterator[None]:
        """Serialise the check-and-take (and the release) of the lock between processes: ``flock`` on
        the side file ``.train.lock.guard``. ``remove``: delete the side file before unlocking it,
        so a finished run folder keeps none. A process that waited on a side file which was deleted
        meanwhile locks the new one instead (the inode it locked must still be the path's)."""
        guard = self.path.with_name(LOCK_FILES[1])
        while True:
            handle = open(guard, "a")  # noqa: SIM115 - closed below
            try:
                if fcntl is not None:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    current = os.stat(guard)
                except FileNotFoundError:
                    current = None
                if current is not None and current.st_ino == os.fstat(handle.fileno()).st_ino:
                    break
            except BaseException:
                handle.close()
                raise
            handle.close()  # the side file was deleted while we waited: lock the current one
        try:
            yield
        finally:
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    guard.unlink()
            handle.close()  # closing the file drops the flock

    def _write(self, owner: dict[str, Any], *, replace: bool) -> bool:
        """Write the lock file atomically: a new file (fails if one exists) or a replacement."""
        tmp = self.path.with_name(f".{LOCK_FILE}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(owner) + "\n", encoding="utf-8")
        try:
            if replace:
                move_into_place(tmp, self.path)
            else:
                os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def acquire(self) -> RunLock:
        """Take the lock; take over a stale one with a warning; raise :class:`RunLockedError` otherwise.

        In a distributed run only rank 0 takes it (the other ranks train the same run folder with it).
        """
        if _rank() > 0:
            return self
        owner = _owner()
        with self._guard():
            if not self._write(owner, replace=False):
                recorded = read_lock(self.path)
                reason = _stale_reason(recorded)
                if reason is None:
                    who = f"process {recorded['pid']} on host {recorded.get('host')}" if recorded else "a process"
                    raise RunLockedError(
                        f"run folder {self.path.parent} is in use by {who} (lock file {self.path}); wait for it "
                        f"to finish, or delete {self.path} if that run is known to be gone"
                    )
                self._write(owner, replace=True)
                warnings.warn(f"taking over the stale lock {self.path} ({reason}: its run ended without "
                              f"releasing it)", UserWarning, stacklevel=2)
        self.held = True
        return self

    def release(self) -> None:
        """Remove the lock file if this process still owns it."""
        if not self.held:
            return
        self.held = False
        if not self.path.parent.is_dir():  # the folder was removed under the lock (a failed start)
            return
        with self._guard(remove=True):
            recorded = read_lock(self.path)
            if recorded is not None and recorded.get("pid") == os.getpid() and recorded.get("host") == \
                    socket.gethostname():
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
