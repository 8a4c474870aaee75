"""The image files of a gallery index and the one folder they may come from.

An index built from a file dataset records ``meta["image_source"] = {"kind": "files", "root": ROOT}``
(an absolute folder: the deepest one holding every image) and each image's ``path`` in
``image_metadata`` relative to ``ROOT``. Older indexes hold absolute paths and no root; their root is
the deepest folder holding every listed file.

``pcmr serve`` never takes the folder it serves from the index: the manifest is a file anyone who can
write the index can edit (its ``manifest_sha256`` is a plain hash), so its root only says where the
images were. The server serves image files only from the folder given when it starts (``pcmr serve
--images DIR``, ``create_app(image_folder=...)``), resolved once by :func:`serving_folder`.
:func:`confined_file` is the only way the server turns an item into a file: the path (relative to that
folder, or absolute under it) must stay under it once symbolic links are resolved (no absolute path
elsewhere, no ``..``), so an edited ``index.json`` can never make the server send another file.
:func:`public_metadata` is an item's metadata as the server shows it: the path relative to the folder,
never a path of the server's disk.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["FILES_SOURCE", "confined_file", "files_source", "image_root", "public_metadata", "relative_paths",
           "serving_folder"]

FILES_SOURCE = "files"


def files_source(paths: Sequence[str | os.PathLike[str]]) -> tuple[dict[str, Any], list[str]]:
    """The ``image_source`` of a gallery of image files and each path relative to its root (POSIX form).

    The root is the deepest folder holding every file (absolute)."""
    absolute = [os.path.abspath(os.fspath(p)) for p in paths]
    root = os.path.commonpath([os.path.dirname(p) for p in absolute]) if absolute else os.getcwd()
    return {"kind": FILES_SOURCE, "root": root}, relative_paths(absolute, root)


def relative_paths(paths: Sequence[str], root: str) -> list[str]:
    """``paths`` (absolute, under ``root``) relative to ``root``, with ``/`` separators."""
    return [PurePosixPath(*Path(os.path.relpath(p, root)).parts).as_posix() for p in paths]


def image_root(meta: dict[str, Any], metadata: Sequence[dict[str, Any]] | None) -> Path | None:
    """The folder the index says its images are in (a hint for ``pcmr serve --images``, never served from
    unless given there): the recorded root of ``meta["image_source"]``,
    else (an index built before roots were recorded) the deepest folder holding every absolute ``path``
    of ``metadata``. None when the index names no image files, or when that folder would be a file
    system root (``/``): then no file is served."""
    source = meta.get("image_source") or {}
    if source.get("kind") == FILES_SOURCE:
        root = source.get("root")
        if not isinstance(root, str) or not os.path.isabs(root):
            return None
        folder = Path(root)
    else:
        paths = [m.get("path") for m in (metadata or []) if isinstance(m, dict)]
        absolute = [p for p in paths if isinstance(p, str) and os.path.isabs(p)]
        if not absolute:
            return None
        folder = Path(os.path.commonpath([os.path.dirname(os.path.normpath(p)) for p in absolute]))
    return None if folder == Path(folder.anchor) else folder


def serving_folder(folder: str | os.PathLike[str] | None) -> Path | None:
    """The folder image files are served from, resolved once (symbolic links followed): ``folder`` as
    given when the server starts, never a folder read from an index. None gives None (no file is served).
    Raises ``ValueError`` when it is not an existing folder or is a file system root (``/``)."""
    if folder is None:
        return None
    try:
        real = Path(folder).resolve(strict=True)
    except (OSError, RuntimeError):
        raise ValueError(f"image folder {os.fspath(folder)!r} does not exist; give the folder holding the "
                         "gallery's images") from None
    if not real.is_dir():
        raise ValueError(f"image folder {os.fspath(folder)!r} is not a folder")
    if real == Path(real.anchor):
        raise ValueError(f"image folder {os.fspath(folder)!r} is the file system root; give the folder holding the "
                         "gallery's images, never '/'")
    return real


def confined_file(root: Path | None, path: Any) -> Path | None:
    """The file ``path`` (relative to ``root``, or absolute under it) names, or None when it is missing,
    not a regular file, or not under ``root`` once ``..`` and symbolic links are resolved. ``root`` is
    resolved here too unless it already is (:func:`serving_folder`)."""
    if root is None or not isinstance(path, str) or not path or "\x00" in path:
        return None
    candidate = Path(path)
    if ".." in candidate.parts:
        return None
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        real = candidate.resolve(strict=True)
        real_root = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if real_root == Path(real_root.anchor) or not real.is_relative_to(real_root) or not real.is_file():
        return None
    return real


def public_metadata(metadata: dict[str, Any] | None, root: Path | None) -> dict[str, Any]:
    """``metadata`` as the server shows it: ``path`` relative to ``root`` (left out when it is not under
    it), so no answer carries a path of the server's disk."""
    out = dict(metadata or {})
    if "path" not in out:
        return out
    path = out.pop("path")
    if root is None or not isinstance(path, str) or ".." in Path(path).parts:
        return out
    if not os.path.isabs(path):
        out["path"] = path
    elif Path(os.path.normpath(path)).is_relative_to(root):
        out["path"] = relative_paths([os.path.normpath(path)], str(root))[0]
    return out
