"""Atomic file writing: readers see the old content or the new, never half a file.

Every writer here puts the data into a temporary file in the destination's folder
(``.NAME.<random>.tmp``), flushes and ``fsync``s it, moves it into place with ``os.replace``
(atomic on POSIX and Windows within one file system) and then ``fsync``s the folder, so the
rename itself survives a power cut. A failed write removes its temporary file and leaves the
destination untouched. :func:`write_folder` does the same for a folder that must appear whole
(a saved model, a gallery index, an evaluation report): written under a temporary name, then swapped
in by renames, under the folder's lock (:mod:`pcmr.locking`); the copies a killed swap leaves are
put back or removed by the next writer or reader (:func:`recover_folder`, :func:`repair_folder`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from safetensors.torch import save as safetensors_save

from pcmr.locking import PathLock, PathLockedError

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_npz",
    "atomic_write_safetensors",
    "atomic_write_text",
    "atomic_write_via_path",
    "DISK_FULL_ERRNOS",
    "folder_leftovers",
    "folder_written",
    "FolderWriteError",
    "fsync_dir",
    "move_into_place",
    "normal_permissions",
    "recover_folder",
    "repair_folder",
    "write_folder",
    "writing_folder",
]

PathLike = str | os.PathLike[str]
#: errors of a full disk or quota, or a file-size limit: reported with the file and a hint
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def fsync_dir(path: PathLike) -> None:
    """``fsync`` a folder (makes a rename inside it durable); a no-op where the platform refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory fds
        return
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on a directory: best effort
            os.fsync(fd)
    finally:
        os.close(fd)


def _current_umask() -> int:
    """The process umask, read without changing it where the platform shows it (Linux ``/proc``);
    elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def normal_permissions(path: PathLike, *, folder: bool = False) -> None:
    """Give a temporary file (``tempfile.mkstemp``: mode 0600) or folder (``mkdtemp``: 0700) the mode a
    plain ``open``/``mkdir`` would have given it: 0666 or 0777 less the umask (0644 / 0755 under the
    usual umask 022), so written models, indexes and reports are readable by others as usual."""
    os.chmod(path, (0o777 if folder else 0o666) & ~_current_umask())


def move_into_place(source: PathLike, destination: PathLike) -> Path:
    """Move the complete, already synced file or folder ``source`` to ``destination`` in one rename
    (``os.replace``; an existing file is replaced) and ``fsync`` the destination's folder, so the
    rename survives a power cut. Both must be on one file system (e.g. ``source`` in the same folder).
    pcmr's only rename into place: every writer here and the checkpoints and run lock use it."""
    destination = Path(destination)
    os.replace(source, destination)
    fsync_dir(destination.parent)
    return destination


def _check_size(handle: IO[bytes], path: Path) -> None:
    """The file on disk holds every byte written through ``handle`` (a write that was cut short without
    an error, e.g. by a library that ignores a failed write, is caught here before the rename)."""
    written, on_disk = handle.tell(), os.fstat(handle.fileno()).st_size
    if on_disk != written:
        raise OSError(errno.EIO, f"only {on_disk} of the {written} bytes written reached the disk", str(path))


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(handle)`` on a binary temp file next to ``path``, then move it into place once its
    size on disk is the number of bytes written (an ``OSError`` otherwise; every write error raises, as
    ``handle`` is a Python file object).

    Creates the parent folder when missing. Returns ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        normal_permissions(tmp)
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
            _check_size(handle, path)
        return move_into_place(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)  # a failed handle write names no file: name the one being written
        raise


def atomic_write_via_path(path: PathLike, write: Callable[[Path], None]) -> Path:
    """Like :func:`atomic_write` for writers that take a file name, not a handle (e.g.
    ``faiss.write_index``): ``write(temp_path)`` writes a temporary file next to ``path``, which is
    then fsync'ed and moved into place; a failed write removes it and leaves ``path`` untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        normal_permissions(tmp)
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        return move_into_place(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)
        full = next((code for code in sorted(DISK_FULL_ERRNOS) if f"({os.strerror(code)})" in str(err)), None)
        if isinstance(err, RuntimeError) and full is not None:  # a library's own writer, e.g. faiss
            raise OSError(full, os.strerror(full), str(path)) from err
        raise


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    def write(handle: IO[bytes]) -> None:
        handle.write(data)

    return atomic_write(path, write)


def atomic_write_text(path: PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any, *, indent: int | None = 2, ensure_ascii: bool = False,
                      newline: bool = True) -> Path:
    """Write ``obj`` as UTF-8 JSON to ``path`` atomically (``newline``: end the file with one)."""
    text = json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii) + ("\n" if newline else "")
    return atomic_write_text(path, text)


def atomic_write_npz(path: PathLike, **arrays: np.ndarray) -> Path:
    """Write arrays to a compressed ``.npz`` atomically; object arrays are refused (no pickle)."""
    for name, array in arrays.items():
        if np.asarray(array).dtype == object:
            raise TypeError(f"array {name!r} has dtype object; only numeric arrays are written (no pickle)")
    def write(handle: IO[bytes]) -> None:
        np.savez_compressed(handle, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as its flags

    return atomic_write(path, write)


def atomic_write_safetensors(path: PathLike, tensors: Mapping[str, torch.Tensor],
                             metadata: Mapping[str, str] | None = None) -> Path:
    """Write ``tensors`` (contiguous, CPU or not) as a safetensors file atomically."""
    data = safetensors_save(dict(tensors), metadata=dict(metadata) if metadata is not None else None)
    return atomic_write_bytes(path, data)


class FolderWriteError(OSError):
    """Writing a folder with :func:`write_folder` failed on an OS error (a full disk, a quota); the
    message names the file being written and says that the previous folder is intact."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno N]"
        return str(self.strerror)

    @property
    def detail(self) -> str:
        """The message without its closing hint (what failed and what is intact)."""
        return str(self.strerror).split("; free disk space")[0]


_WRITTEN: set[str] = set()  # folders whose new content write_folder put in place in this process


def folder_written(path: PathLike) -> bool:
    """Whether a :func:`write_folder` of ``path`` in this process put its new folder in place (so a
    command stopped afterwards, e.g. by SIGTERM, says that ``path`` holds the new content)."""
    return os.path.realpath(path) in _WRITTEN


def _leftover_pattern(path: Path) -> re.Pattern[str]:
    """Names of the temporary (``.tmp``) and set-aside (``.old``) copies :func:`write_folder` makes
    for ``path``: ``.NAME.<8 random characters of tempfile>.tmp|old``."""
    return re.compile(rf"^\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.(tmp|old)$")


def folder_leftovers(path: PathLike) -> list[Path]:
    """The copies of ``path`` (symbolic links resolved) left by a :func:`write_folder` that was killed
    (``kill -9``, a power cut)."""
    path = Path(os.path.realpath(path))
    pattern = _leftover_pattern(path)
    try:
        return sorted(p for p in path.parent.iterdir() if pattern.match(p.name))
    except OSError:  # no such folder, a file, no permission: nothing to put right
        return []


def recover_folder(path: PathLike) -> list[Path]:
    """Put back or remove the copies of ``path`` left by a killed :func:`write_folder`; the caller
    holds ``path``'s :class:`~pcmr.locking.PathLock` (no live writer). Returns what it found.

    A writer killed between "old folder renamed aside" and "new folder renamed in" leaves ``path``
    missing and the old folder as ``.NAME.X.old``: it is renamed back (the newest one, should there
    be several), so the old state loads again. Every other leftover (``.NAME.X.tmp``: a partial or
    unswapped new folder; ``.NAME.X.old``: an old folder whose removal did not finish) is deleted.
    """
    path = Path(os.path.realpath(path))
    found = folder_leftovers(path)
    if not found:
        return found
    aside = [p for p in found if p.name.endswith(".old")]
    if aside and not os.path.lexists(path):
        newest = max(aside, key=lambda p: p.stat().st_mtime_ns)
        move_into_place(newest, path)
    for leftover in found:
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        elif os.path.lexists(leftover):
            leftover.unlink()
    return found


def repair_folder(path: PathLike) -> None:
    """Before reading ``path``: when a killed writer left copies of it (:func:`recover_folder`) and no
    live process is writing it, put them right. Nothing happens while another process holds its lock."""
    if not folder_leftovers(path):
        return
    with contextlib.suppress(PathLockedError, OSError), PathLock(path, "writing it"):
        recover_folder(path)


@contextlib.contextmanager
def writing_folder(path: PathLike, what: str = "writing it") -> Iterator[Path]:
    """Hold ``path``'s lock (:class:`~pcmr.locking.PathLock`; another writer is refused with
    :class:`~pcmr.locking.PathLockedError`) and recover the leftovers of a killed writer before the
    caller checks or writes ``path`` (e.g. a whole ``pcmr search --build``: check, encode, write)."""
    with PathLock(path, what):
        recover_folder(path)
        yield Path(path)


def _written_file(err: OSError, tmp: Path, path: Path) -> str:
    """The file an error names, with the temporary folder replaced by the final one."""
    name = err.filename if isinstance(err.filename, str) else None
    if not name:
        return str(path)
    if name.startswith(str(tmp)):
        name = str(path) + name[len(str(tmp)):]
    # an atomic_write temp file, or a folder of a nested write_folder: the name it is written for
    return re.sub(r"/\.([^/]+)\.[a-z0-9_]{8}\.tmp(?=/|$)", r"/\1", name)


def _folder_error(err: OSError, tmp: Path, path: Path, existed: bool) -> FolderWriteError:
    kept = f"the previous {path} is intact" if existed else f"nothing was written to {path}"
    hint = "; free disk space (or raise the quota / file-size limit) and run it again" \
        if err.errno in DISK_FULL_ERRNOS else ""
    return FolderWriteError(err.errno or errno.EIO,
                            f"writing {_written_file(err, tmp, path)} failed ({err.strerror or err}); {kept}{hint}")


def write_folder(path: PathLike, write: Callable[[Path], None]) -> Path:
    """Call ``write(temp_folder)``, then move the folder to ``path``, replacing an existing one.

    ``path`` always holds a complete folder, the old one until the new one is in place: the new
    folder is written as ``.NAME.X.tmp`` beside it, the old one renamed aside to ``.NAME.X.old``, the
    new one renamed in, then the old one removed. A failure at any step (a full disk, a signal)
    removes the temporary folder and puts the old one back; a process killed between the two renames
    leaves the old folder aside, which the next writer (or reader, :func:`repair_folder`) renames
    back. The whole write holds ``path``'s lock (:class:`~pcmr.locking.PathLock`), so a second writer
    of the same path is refused. An OS error is raised as :class:`FolderWriteError` naming the file
    being written and saying that the previous folder is intact. A symbolic link ``path`` is written
    through: the folder it leads to is replaced and locked, and the link stays.
    """
    path = Path(os.path.realpath(path))  # a link is written through: its target is replaced, under its lock
    path.parent.mkdir(parents=True, exist_ok=True)
    with PathLock(path, "writing it"):
        recover_folder(path)
        existed = os.path.lexists(path)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        old = tmp.with_name(tmp.name[: -len(".tmp")] + ".old")  # unique: named after the temp folder
        try:
            normal_permissions(tmp, folder=True)
            write(tmp)
            fsync_dir(tmp)
            if existed:
                move_into_place(path, old)
            move_into_place(tmp, path)
        except BaseException as err:
            if os.path.lexists(old) and not os.path.lexists(path):
                with contextlib.suppress(OSError):
                    move_into_place(old, path)
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(err, OSError) and not isinstance(err, FolderWriteError):
                raise _folder_error(err, tmp, path, existed) from err
            raise
        _WRITTEN.add(str(path))
        if existed:
            try:
                shutil.rmtree(old, ignore_errors=True)
            except BaseException:  # a signal while removing the old copy: the new folder is in place, finish
                shutil.rmtree(old, ignore_errors=True)
                raise
    return path
