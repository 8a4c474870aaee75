"""Atomic file writing: readers see the old content or the new, never half a file.

Every writer here puts the data into a temporary file in the destination's folder
(``.NAME.<random>.tmp``), flushes and ``fsync``s it, moves it into place with ``os.replace``
(atomic on POSIX and Windows within one file system) and then ``fsync``s the folder, so the
rename itself survives a power cut. A failed write removes its temporary file and leaves the
destination untouched. :func:`write_folder` does the same for a folder that must appear whole
(a saved model): written under a temporary name, then swapped in by renames.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from safetensors.torch import save as safetensors_save

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_npz",
    "atomic_write_safetensors",
    "atomic_write_text",
    "atomic_write_via_path",
    "fsync_dir",
    "move_into_place",
    "normal_permissions",
    "write_folder",
]

PathLike = str | os.PathLike[str]


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


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(handle)`` on a binary temp file next to ``path``, then move it into place.

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
        return move_into_place(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
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


def write_folder(path: PathLike, write: Callable[[Path], None]) -> Path:
    """Call ``write(temp_folder)``, then move the folder to ``path``, replacing an existing one.

    ``path`` always holds a complete folder: the old one until the new one is in place (the old is
    renamed aside, the new renamed in, then the old removed). A failed ``write`` removes its
    temporary folder and leaves ``path`` untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        normal_permissions(tmp, folder=True)
        write(tmp)
        fsync_dir(tmp)
        old = None
        if path.exists():
            old = tmp.with_name(tmp.name[: -len(".tmp")] + ".old")  # unique: named after the temp folder
            move_into_place(path, old)
        move_into_place(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path
